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


@pytest.fixture
def make_settings(tmp_path: Path):
    def _make(content: Path, **overrides) -> Settings:
        return load_settings(data_dir=tmp_path / "data", content_dir=content, **overrides)

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
def real_settings(make_settings, repo_content: Path) -> Settings:
    return make_settings(repo_content)


@pytest.fixture
def real_client(real_settings: Settings) -> Iterator[TestClient]:
    """The app over a fresh data dir holding the repository's entries."""
    from app.web import create_app

    with TestClient(create_app(real_settings)) as client:
        yield client


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


def write_token(clone: Path) -> str:
    """A new write token for the server whose folder is `clone`, made with the CLI."""
    created = subprocess.run(
        [pitfalls_command(), "token", "create", "--name", "tests", "--scope", "write"],
        cwd=clone,
        env={k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")},
        capture_output=True,
        text=True,
        check=True,
    )
    return created.stdout.strip()


@contextmanager
def running_server(
    folder: Path, *, settings: dict[str, str] | None = None, fresh: bool = True
) -> Iterator[tuple[str, Path]]:
    """`pitfalls serve` on a free port in `folder` (a clone with the repository's entries);
    `fresh=False` serves a folder another server already prepared (a second process)."""
    pitfalls = pitfalls_command()
    clone = folder
    if fresh:
        shutil.copytree(REPO_CONTENT, clone / "content")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.update(settings or {})
    log_path = clone.parent / f"serve-{clone.name}-{port}.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [pitfalls, "serve", "--port", str(port)], cwd=clone, env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            pytest.fail(f"pitfalls serve exited early:\n{log_path.read_text()}")
        try:
            if get(base + "/api/v1/health")[0] == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        log.close()
        pytest.fail(f"pitfalls serve did not answer within 60 s:\n{log_path.read_text()}")
    try:
        yield base, clone
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One server for the tests that only read."""
    with running_server(tmp_path_factory.mktemp("clone")) as started:
        yield started
