import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.settings import Settings, load_settings
from app.storage import create_db_engine, upgrade_schema
from tests.postgres import PostgresServer
from tests.prepared import prepare_data_dir

REPO = Path(__file__).resolve().parent.parent
REPO_CONTENT = REPO / "content"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip locally when a real component is missing; under CI that is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


def entry_text(
    entry_id: str = "sample-entry",
    *,
    title: str = "A sample pitfall about view()",
    kind: str = "error",
    extra_front: str = "",
    signatures: str | None = None,
    body: str | None = None,
) -> str:
    """A valid entry; tests change one part of it at a time."""
    if signatures is None:
        signatures = (
            "signatures:\n"
            "  - exception: RuntimeError\n"
            f"    message: 'failure in {entry_id} number (?P<n>\\d+)'\n"
            f"    example: 'RuntimeError: failure in {entry_id} number 42 happened'\n"
        )
    if body is None:
        body = (
            "## What you see\n\nAn error.\n\n## Why it happens\n\nBecause.\n\n"
            "## Fix\n\n```python fix\nprint('fixed')\n```\n"
        )
    return (
        "---\n"
        f"id: {entry_id}\n"
        f"title: {title}\n"
        "summary: One sentence that stands alone.\n"
        f"kind: {kind}\n"
        "tags: [tensor]\n"
        f"{extra_front}"
        f"{signatures}"
        "---\n\n"
        f"{body}"
    )


@pytest.fixture
def content_dir(tmp_path: Path) -> Path:
    path = tmp_path / "content"
    path.mkdir()
    return path


@pytest.fixture
def repo_content(tmp_path: Path) -> Path:
    """A private copy of the repository's real entries."""
    path = tmp_path / "repo-content"
    shutil.copytree(REPO_CONTENT, path)
    return path


# ---- passwords: real argon2, each test password hashed once per session -------------------


class _HashedOnce:
    """The app's own argon2 hasher, remembering the hash of each password it was given: tests
    add the same few users with the same few passwords hundreds of times, and each hash costs
    about 0.2 s of CPU. Verifying is never cached (every login still runs argon2)."""

    def __init__(self, real) -> None:
        self._real = real
        self._hashes: dict[str | bytes, str] = {}

    def hash(self, password, *, salt=None):
        if salt is not None:
            return self._real.hash(password, salt=salt)
        if password not in self._hashes:
            self._hashes[password] = self._real.hash(password)
        return self._hashes[password]

    def __getattr__(self, name: str):
        return getattr(self._real, name)


@pytest.fixture(autouse=True, scope="session")
def _passwords_hashed_once() -> Iterator[None]:
    from app.accounts import passwords

    real = passwords._hasher
    passwords._hasher = _HashedOnce(real)
    try:
        yield
    finally:
        passwords._hasher = real


# ---- the database: SQLite, or PostgreSQL for the modules marked `both_databases` -----------

BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `both_databases` that reaches the database runs once on each backend
    (unless it names its backends itself: `@pytest.mark.parametrize("backend", ["sqlite"],
    indirect=True)` for a test of SQLite's own settings). A module's shared app
    (`shared_client`) is one per backend for the whole module."""
    if "shared_backend" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_databases")
        backends = BACKENDS if both else ("sqlite",)
        metafunc.parametrize("shared_backend", backends, indirect=True, scope="module")
    if "backend" not in metafunc.fixturenames:
        return
    if not metafunc.definition.get_closest_marker("both_databases"):
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        if "backend" in marker.args[0]:
            return
    metafunc.parametrize("backend", BACKENDS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow`: a test that starts a real server or process (e2e), or runs on PostgreSQL. The
    quick lane, `pytest -m "not slow"`, runs the rest: every module, on SQLite, in process."""
    slow = pytest.mark.slow
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and "postgresql" in (
            callspec.params.get("backend"),
            callspec.params.get("shared_backend"),
        )
        if on_postgres or item.get_closest_marker("e2e"):
            item.add_marker(slow)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole run; each test gets a database of its own."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require(False, "psycopg is not installed (pip install -e '.[test]')")
    server = PostgresServer()
    require(server.available, "PostgreSQL's initdb and pg_ctl are not installed")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def database_url(request: pytest.FixtureRequest, backend: str) -> Iterator[str]:
    """Empty for SQLite (a file in the data dir); a fresh PostgreSQL database otherwise."""
    yield from _database_for(request, backend)


def _database_for(request: pytest.FixtureRequest, backend: str) -> Iterator[str]:
    if backend == "sqlite":
        yield ""
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    with server.database() as url:
        yield url


@pytest.fixture
def make_settings(tmp_path: Path, database_url: str):
    def _make(content: Path, **overrides) -> Settings:
        if database_url:
            overrides.setdefault("database_url", database_url)
        overrides.setdefault("data_dir", tmp_path / "data")
        return load_settings(content_dir=content, **overrides)

    return _make


@pytest.fixture
def settings(make_settings, content_dir: Path) -> Settings:
    return make_settings(content_dir)


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def real_settings(
    make_settings, repo_content: Path, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Settings over a private copy of the repository's entries, with its data dir prepared
    (on SQLite: a copy of one built once per session, see `prepare_data_dir`)."""
    settings = make_settings(repo_content)
    prepare_data_dir(settings, tmp_path_factory)
    return settings


@pytest.fixture
def real_client(real_settings: Settings) -> Iterator[TestClient]:
    """The app over a fresh data dir holding the repository's entries."""
    from app.web import create_app

    with TestClient(create_app(real_settings)) as client:
        yield client


@pytest.fixture(scope="module")
def shared_backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="module")
def shared_client(
    request: pytest.FixtureRequest, shared_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """One app over the repository's entries for a whole module (per backend), for tests that
    only read: starting an app (its matcher, its index readers) costs about a second, and most
    page and API tests change nothing. A test that writes takes `real_client`, its own."""
    from app.web import create_app

    folder = tmp_path_factory.mktemp("shared-app")
    content = folder / "repo-content"
    shutil.copytree(REPO_CONTENT, content)
    with contextmanager(_database_for)(request, shared_backend) as url:
        overrides = {"database_url": url} if url else {}
        settings = load_settings(data_dir=folder / "data", content_dir=content, **overrides)
        prepare_data_dir(settings, tmp_path_factory)
        with TestClient(create_app(settings)) as client:
            yield client


# ---- the search engine: Whoosh, and tantivy where the test asks for both -------------------

SEARCH_ENGINES = ("whoosh", "tantivy")


def _require_engine(name: str) -> None:
    if name == "tantivy":
        found = importlib.util.find_spec("tantivy") is not None
        require(found, "tantivy is not installed (pip install -e '.[test]')")


@pytest.fixture(params=SEARCH_ENGINES)
def search_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each search engine in turn, as PITFALLS_SEARCH_ENGINE (read by the settings and by
    `app.search.index` when no engine is named)."""
    _require_engine(request.param)
    monkeypatch.setenv("PITFALLS_SEARCH_ENGINE", request.param)
    return request.param


@pytest.fixture(scope="module", params=SEARCH_ENGINES)
def module_search_engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """`search_engine` for a module's shared fixtures (an index built once per engine)."""
    _require_engine(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PITFALLS_SEARCH_ENGINE", request.param)
        yield request.param


@pytest.fixture(scope="module")
def engine_client(
    module_search_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """One app over the repository's entries per module and search engine, for search tests
    that only read. Its search budget is a minute: such modules search every entry's title,
    and a loaded machine must not stop one at the budget."""
    from app.web import create_app

    data = tmp_path_factory.mktemp("engine-app")
    settings = load_settings(
        data_dir=data / "data", content_dir=REPO_CONTENT, search_budget_ms=60_000
    )
    prepare_data_dir(settings, tmp_path_factory)
    with TestClient(create_app(settings)) as started:
        yield started


# ---- a real server, started once for the e2e and browser tests -----------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def pitfalls_command() -> str:
    pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or shutil.which(
        "pitfalls"
    )
    require(pitfalls is not None, "the pitfalls command is not installed")
    assert pitfalls is not None
    return pitfalls


def write_token(
    clone: Path, settings: dict[str, str] | None = None, *, scope: str = "write"
) -> str:
    """A new token (write, unless `scope` says read) for the server whose folder is `clone`,
    made with the CLI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.update(settings or {})
    created = subprocess.run(
        [pitfalls_command(), "token", "create", "--name", f"tests-{scope}", "--scope", scope],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return created.stdout.strip()


class Served:
    """One `pitfalls serve` process started by `running_servers`."""

    def __init__(self, folder: Path, settings: dict[str, str] | None, fresh: bool) -> None:
        if fresh:
            shutil.copytree(REPO_CONTENT, folder / "content")
        self.folder = folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
        self.env.update(settings or {})
        # Each test's first start does the whole work, and no test fills the user's cache.
        self.env.setdefault("PITFALLS_FIRST_START_SNAPSHOTS", "off")
        self.log_path = folder.parent / f"serve-{folder.name}-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [pitfalls_command(), "serve", "--port", str(self.port)],
            cwd=self.folder,
            env=self.env,
            stdout=log,
            stderr=log,
        )
        log.close()  # the child has its own copy

    def wait_ready(self, timeout: float = 90) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"pitfalls serve exited early:\n{self.log_path.read_text()}")
            try:
                # Ours only once our uvicorn says it holds the port: the port was free when it
                # was picked, and another process may have taken it since (its health answers
                # then, and ours fails to bind and exits: seen above on the next turn).
                if get(self.base + "/api/v1/health")[0] == 200 and self._bound():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.process.kill()
        pytest.fail(
            f"pitfalls serve did not answer within {timeout} s:\n{self.log_path.read_text()}"
        )

    def _bound(self) -> bool:
        if self.env.get("PITFALLS_LOG_LEVEL", "info").lower() not in ("debug", "info"):
            return self.process is not None and self.process.poll() is None  # no line to read
        log = self.log_path.read_text(errors="replace")
        return f"Uvicorn running on http://127.0.0.1:{self.port}" in log

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def running_servers(
    folders: list[Path],
    *,
    settings: dict[str, str] | None = None,
    fresh: bool = True,
    ready_s: float = 90,
) -> Iterator[list[Served]]:
    """`pitfalls serve` in each folder, all started at the same moment, then all awaited
    (`ready_s` each: a first start over many entries ingests them all first)."""
    servers = [Served(folder, settings, fresh) for folder in folders]
    try:
        for served in servers:
            served.start()
        for served in servers:
            served.wait_ready(ready_s)
        try:
            yield servers
        except BaseException:
            # A test that fails against a server shows what the server said (pytest prints a
            # failed test's output): the requests it saw, how long each took, any traceback.
            for served in servers:
                lines = served.log_path.read_text(errors="replace").splitlines()
                print(f"---- the last lines of {served.log_path.name} ----", *lines[-60:], sep="\n")
            raise
    finally:
        for served in servers:
            served.stop()


@contextmanager
def running_server(
    folder: Path,
    *,
    settings: dict[str, str] | None = None,
    fresh: bool = True,
    ready_s: float = 90,
) -> Iterator[tuple[str, Path]]:
    """`pitfalls serve` on a free port in `folder` (a clone with the repository's entries);
    `fresh=False` serves a folder another server already prepared (a second process)."""
    with running_servers([folder], settings=settings, fresh=fresh, ready_s=ready_s) as (served,):
        yield served.base, served.folder


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One server for the tests that only read."""
    with running_server(tmp_path_factory.mktemp("clone")) as started:
        yield started


# ---- no database work on the event loop ------------------------------------------------------


def _on_event_loop() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture(autouse=True)
def no_database_on_the_event_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test fails when the app ran a SQL statement on an event loop's thread: one slow
    statement there (a lock wait, a full pool) stalls every request of the process. Tests that
    drive async code of their own on purpose opt out with `@pytest.mark.loop_may_query`."""
    import traceback

    from sqlalchemy import event

    if request.node.get_closest_marker("loop_may_query"):
        yield
        return
    seen: list[str] = []

    def check(conn, cursor, statement, parameters, context, executemany) -> None:
        if _on_event_loop():
            frames = [
                f"{f.filename}:{f.lineno} {f.name}"
                for f in traceback.extract_stack()
                if "/app/" in f.filename
            ]
            seen.append(f"{statement.split()[0]} … from {' < '.join(reversed(frames[-4:]))}")

    event.listen(Engine, "before_cursor_execute", check)
    try:
        yield
    finally:
        event.remove(Engine, "before_cursor_execute", check)
    if seen:
        unique = sorted(set(seen))
        pytest.fail(
            f"{len(seen)} SQL statement(s) ran on the event loop:\n" + "\n".join(unique[:12])
        )
