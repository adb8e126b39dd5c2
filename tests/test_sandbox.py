"""The sandbox `pitfalls verify` runs snippets in: a snippet stored through the API tries to reach
the data dir, the secret key, the parent's environment, the invoking user's home and the network,
and reaches none of them; real snippets still pass. A fork bomb and ten children holding 300 MB
each are stopped at the tree's limits, reported as such, and leave no process behind; inside the
sandbox the kernel itself refuses the fork past the limit (under root too).

Under CI a missing or broken bubblewrap fails these tests; elsewhere they are skipped.
"""

import contextlib
import glob
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app import storage
from app.accounts import CLI, create_token
from app.ingest import ingest_content
from app.matching import SignatureMatcher
from app.models import Verification
from app.sandbox import Bubblewrap, SandboxUnavailable, Unsandboxed, find_bubblewrap
from app.settings import Settings
from app.snippet_limits import SnippetCgroup, TreeLimits
from app.storage import create_db_engine, upgrade_schema
from app.verification import verify_entries
from app.verification.running import run_snippet
from app.verification.snippets import Environment, SnippetToRun
from tests.conftest import REPO, entry_text, require

# In the slow lane: every test starts real sandboxed processes.
pytestmark = pytest.mark.slow

CANARY_VARIABLE = "PITFALLS_SANDBOX_CANARY"

# Prints what it could reach, then fails unless it reached everything: an escape makes it pass.
HOSTILE_SNIPPET = """
import glob, json, os, socket, sqlite3

DATA, HOME, ANCESTOR, PORT, MARKER = {data!r}, {home!r}, {ancestor}, {port}, {marker!r}
leaks, blocked = {{}}, []


def attempt(name, action):
    try:
        leaks[name] = str(action())[:80]
    except Exception:
        blocked.append(name)


def canaries(paths):
    found = []
    for path in paths:
        try:
            found += [v for v in open(path, "rb").read().split(b"\\0") if v.startswith(b"PITFALLS_")]
        except OSError:
            pass
    if not found:
        raise LookupError("no PITFALLS_ variable")
    return b" ".join(found).decode()


def connect():
    with socket.create_connection(("127.0.0.1", PORT), timeout=3) as sock:
        sock.sendall(b"escaped")
    return "connected"


def session_key():  # kept in the database (table app_secret), read-only as a reader would
    database = "file:" + os.path.join(DATA, "pitfalls.db") + "?mode=ro"
    return sqlite3.connect(database, uri=True).execute("SELECT value FROM app_secret").fetchone()[0]


attempt("secret_key", session_key)
attempt("database", lambda: open(os.path.join(DATA, "pitfalls.db"), "rb").read(15))
attempt("data_dir", lambda: os.listdir(DATA))
attempt("getppid_environ", lambda: canaries([f"/proc/{{os.getppid()}}/environ"]))
attempt("ancestor_environ", lambda: len(open(f"/proc/{{ANCESTOR}}/environ", "rb").read()))
attempt("any_environ", lambda: canaries(glob.glob("/proc/*/environ")))
attempt("home_file", lambda: open(os.path.join(HOME, MARKER)).read())
attempt("home_listing", lambda: [n for n in os.listdir(HOME) if n == MARKER][0])
attempt("network", connect)
print("REACHED " + json.dumps(leaks))
if blocked:
    raise SystemExit("blocked: " + " ".join(blocked))
"""
ATTEMPTS = [
    "secret_key",
    "database",
    "data_dir",
    "getppid_environ",
    "ancestor_environ",
    "any_environ",
    "home_file",
    "home_listing",
    "network",
]


@pytest.fixture(scope="module")
def sandbox() -> Bubblewrap:
    try:
        return find_bubblewrap(sys.executable)
    except SandboxUnavailable as exc:
        require(False, f"no working bubblewrap sandbox: {exc}")
        raise


class Listener:
    """A TCP port on 127.0.0.1 that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(100) or b"(connected)")
                except OSError:
                    self.received.append(b"(connected)")

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.close()


@pytest.fixture
def home_marker() -> Iterator[tuple[str, str]]:
    """A file with a secret in the invoking user's real home, removed afterwards."""
    name = f".pitfalls-sandbox-test-{secrets.token_hex(4)}"
    content = f"home-secret-{secrets.token_hex(8)}"
    path = Path.home() / name
    try:
        path.write_text(content, encoding="utf-8")
    except OSError as exc:
        pytest.skip(f"cannot write a marker in the home folder: {exc}")
    yield name, content
    path.unlink(missing_ok=True)


def _store_through_the_api(settings: Settings, markdown: str) -> None:
    from app.web import create_app

    with TestClient(create_app(settings)) as client:
        with Session(client.app.state.runtime.engine) as session:
            _, token = create_token(
                session, name="ci-bot", scope="write", expires_in=None, owner=CLI
            )
            session.commit()
        created = client.post(
            "/api/v1/entries",
            json={"markdown": markdown, "message": "A helpful demo"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert created.status_code == 201, created.text


def _verify(settings: Settings, canary: str, *args: str, path: str | None = None):
    """`pitfalls verify ARGS` in its own process, as a person would run it, with a PITFALLS_
    variable in its environment that no snippet may see."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.update(
        {
            "PITFALLS_DATA_DIR": str(settings.data_dir),
            "PITFALLS_CONTENT_DIR": str(settings.content_dir),
            CANARY_VARIABLE: canary,
            "PYTHONPATH": str(REPO),
        }
    )
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-c", "from app.cli import cli; cli()", "verify", *args],
        cwd=settings.data_dir.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_hostile_wiki_snippet_reaches_nothing(
    sandbox: Bubblewrap,
    make_settings,
    content_dir: Path,
    listener: Listener,
    home_marker: tuple[str, str],
):
    (content_dir / "plain-entry.md").write_text(entry_text("plain-entry"), encoding="utf-8")
    settings = make_settings(content_dir)
    marker_name, marker_content = home_marker
    code = HOSTILE_SNIPPET.format(
        data=str(settings.data_dir.resolve()),
        home=str(Path.home()),
        ancestor=os.getpid(),  # this test: the parent of `pitfalls verify`
        port=listener.port,
        marker=marker_name,
    )
    body = (
        "## What you see\n\nNothing odd.\n\n## Why it happens\n\nIt does.\n\n## Fix\n\n"
        f"```python demo\n{code.strip()}\n```\n"
    )
    _store_through_the_api(
        settings, entry_text("helpful-demo", kind="howto", signatures="", body=body)
    )
    engine = create_db_engine(settings)
    secret_key = storage.shared_secret(engine, name="session", candidate="unused")
    engine.dispose()
    canary = f"canary-{secrets.token_hex(12)}"
    secrets_to_keep = [secret_key, canary, marker_content, "SQLite format", marker_name]

    # Not named and no --include-wiki: the wiki's snippet does not run at all.
    default = _verify(settings, canary, "--json")
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout)["left_out_wiki_entries"] == ["helpful-demo"]
    assert "left out 1 entry edited in the wiki (helpful-demo)" in default.stderr

    run = _verify(settings, canary, "--include-wiki", "--json", "helpful-demo")
    assert run.returncode == 1, run.stderr
    answer = json.loads(run.stdout)
    assert "inside bubblewrap" in answer["environment"]["sandbox"]
    [result] = answer["results"]
    assert result["status"] == "failed"
    assert result["reason"].endswith("blocked: " + " ".join(ATTEMPTS)), result["reason"]
    assert "REACHED {}" in result["reason"]
    for secret in secrets_to_keep:
        assert secret not in run.stdout + run.stderr
    assert listener.received == []
    engine = create_db_engine(settings)
    with Session(engine) as session:
        stored = session.exec(
            select(Verification).where(Verification.entry_id == "helpful-demo")
        ).all()
    engine.dispose()
    assert [v.status for v in stored] == ["failed"]
    assert not any(secret in stored[0].reason for secret in secrets_to_keep)

    # The control: with no sandbox to be found (no bwrap on PATH), verify refuses the wiki's
    # snippet; told --unsafe-no-sandbox, the same snippet reaches everything and passes, which is
    # what an escape from the sandbox would look like.
    no_bwrap = str(Path(sys.executable).parent)
    refused = _verify(settings, canary, "--include-wiki", "helpful-demo", path=no_bwrap)
    assert refused.returncode == 2
    assert "Refusing" in refused.stderr and "--unsafe-no-sandbox" in refused.stderr
    unsafe = _verify(
        settings, canary, "--include-wiki", "--unsafe-no-sandbox", "--json", path=no_bwrap
    )
    assert unsafe.returncode == 0, unsafe.stdout + unsafe.stderr
    statuses = {r["entry"]: r["status"] for r in json.loads(unsafe.stdout)["results"]}
    assert statuses == {"helpful-demo": "passed", "plain-entry": "passed"}
    assert listener.received == [b"escaped"]


ENV = Environment(sys.executable, "3.11", "test", None, False, 0, {})
NO_MATCHER = SignatureMatcher([])


def _run(sandbox: Bubblewrap, code: str, **options: str) -> tuple[str, str]:
    snippet = SnippetToRun("mine", 0, "fix", code, options)
    result = run_snippet(snippet, ENV, NO_MATCHER, runner=sandbox, timeout_s=20, memory_mb=1024)
    return result.status, result.reason


def test_the_sandbox_keeps_the_limits_and_kills_every_child(sandbox: Bubblewrap):
    tag = f"{time.time_ns() % 10**6}.25"
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({tag})'])\n"
        "time.sleep(60)\n"
    )
    assert _run(sandbox, code, timeout="2") == ("failed", "timed out after 2 s")
    time.sleep(0.5)
    leftovers = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if tag.encode() in Path(path).read_bytes():
                leftovers.append(path)
        except OSError:
            pass
    assert leftovers == []
    status, reason = _run(sandbox, "x = bytearray(2 * 1024 ** 3)")
    assert status == "failed" and "MemoryError" in reason
    status, reason = _run(sandbox, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert status == "failed" and reason.startswith("crashed with SIGSEGV"), reason


def test_inside_the_sandbox_a_snippet_has_a_small_world_of_its_own(sandbox: Bubblewrap):
    code = (
        "import getpass, json, os, tempfile\n"
        "open('out.txt', 'w').write('x')\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'user': getpass.getuser(),\n"
        "    'env': sorted(os.environ), 'tmp': tempfile.gettempdir(), 'home': os.environ['HOME'],\n"
        "    'writable_home': os.access(os.environ['HOME'], os.W_OK), 'cwd': os.getcwd(),\n"
        "    'usr_writable': os.access('/usr', os.W_OK), 'pids': sorted(\n"
        "        int(p) for p in os.listdir('/proc') if p.isdigit())}))\n"
        "raise SystemExit(3)\n"
    )
    status, reason = _run(sandbox, code)
    assert status == "failed"
    facts = json.loads(reason.removeprefix("exited with code 3: "))
    assert (facts["uid"], facts["gid"], facts["user"]) == (65534, 65534, "sandbox")
    assert set(facts["env"]) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "MPLBACKEND",
        "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "PWD",
    }
    assert facts["writable_home"] and not facts["usr_writable"]
    assert facts["tmp"] != str(Path.home()) and facts["home"] != str(Path.home())
    assert len(facts["pids"]) <= 3  # bwrap's init, the snippet (and nothing of the host)


def test_a_bind_that_would_expose_a_secret_folder_makes_the_sandbox_unavailable(
    sandbox: Bubblewrap,
):
    prefix = sorted(sandbox.interpreter.paths, key=len)[0]
    with pytest.raises(SandboxUnavailable, match="would expose"):
        find_bubblewrap(sys.executable, keep_out=[Path(prefix) / "data"])
    # The home folder is never bound whole, even where the interpreter lives under it.
    _, bound = sandbox.binds()
    assert str(Path.home()) not in bound and "/" not in bound


def test_a_real_repro_and_fix_from_content_pass_in_the_sandbox(
    sandbox: Bubblewrap, make_settings, repo_content: Path
):
    pytest.importorskip("torch")
    settings = make_settings(repo_content)
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    ingest_content(engine, repo_content)
    run = verify_entries(engine, entry_ids=["view-non-contiguous"], runner=sandbox, jobs=2)
    engine.dispose()
    assert [(r.snippet.role, r.status, r.reason) for r in run.results] == [
        ("fix", "passed", ""),
        ("repro", "passed", ""),
    ]
    assert run.sandbox.startswith("inside bubblewrap")


def test_without_bwrap_content_snippets_still_run_unsandboxed(make_settings, content_dir: Path):
    (content_dir / "plain-entry.md").write_text(entry_text("plain-entry"), encoding="utf-8")
    settings = make_settings(content_dir)
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    ingest_content(engine, content_dir)
    runner = Unsandboxed(sys.executable, why="bwrap is not installed")
    run = verify_entries(engine, runner=runner, jobs=1)
    engine.dispose()
    assert [r.status for r in run.results] == ["passed"]
    assert run.sandbox == "without a sandbox (bwrap is not installed)"


# Starts up to 2,000 processes, each sleeping under the name `tag`; a refused fork is printed
# and tried again, so that only a limit that stops the tree ends it before its timeout.
FORK_BOMB = """
import ctypes, os, time
libc = ctypes.CDLL(None)
started, refused = 0, 0
for _ in range(2000):
    try:
        pid = os.fork()
    except OSError as exc:
        if not refused:
            print(f"fork refused after {{started}}: {{exc.strerror}}", flush=True)
        refused += 1
        time.sleep(0.01)
        continue
    if pid == 0:
        libc.prctl(15, {tag!r}.encode(), 0, 0, 0)  # PR_SET_NAME: findable by the test
        time.sleep(120)
        os._exit(0)
    started += 1
print(f"started {{started}}", flush=True)
time.sleep(120)
"""

# Ten children, each holding 300 MB of its own (written, so resident) under the name `tag`.
MEMORY_HOGS = """
import ctypes, os, time
libc = ctypes.CDLL(None)
for _ in range(10):
    if os.fork() == 0:
        libc.prctl(15, {tag!r}.encode(), 0, 0, 0)
        held = b"x" * (300 * 1024 * 1024)
        time.sleep(120)
        os._exit(0)
    time.sleep(0.2)
time.sleep(120)
"""


def _named(tag: str) -> list[int]:
    found = []
    for path in glob.glob("/proc/[0-9]*/comm"):
        try:
            if Path(path).read_text().strip() == tag:
                found.append(int(path.split("/")[2]))
        except (OSError, ValueError):
            pass
    return found


@pytest.fixture
def process_name() -> Iterator[str]:
    """A name for a test's snippet processes; any still running afterwards is killed."""
    tag = f"pf{secrets.token_hex(6)}"
    yield tag
    for pid in _named(tag):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _left_running(tag: str) -> list[int]:
    """Processes named `tag` still alive a moment after the run (they die as they are reaped)."""
    for _ in range(50):
        alive = [p for p in _named(tag) if _state(p) != "Z"]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _state(pid: int) -> str:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "Z"
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def _run_limited(runner, code: str, **limits: int) -> tuple[str, str]:
    snippet = SnippetToRun("mine", 0, "fix", code, {})
    result = run_snippet(snippet, ENV, NO_MATCHER, runner=runner, timeout_s=60, **limits)
    return result.status, result.reason


def test_inside_the_sandbox_the_kernel_refuses_the_fork_past_the_limit(
    sandbox: Bubblewrap, process_name: str
):
    # No watchdog here: the bare launch, so only the kernel's RLIMIT_NPROC can refuse a fork.
    code = FORK_BOMB.format(tag=process_name).replace("range(2000)", "range(200)")
    # At most 200 tries; then the parent kills its group (its children) and itself.
    code = code.removesuffix("time.sleep(120)\n") + "os.killpg(0, 9)\n"
    with sandbox.python(script=code, max_processes=30) as launch:
        done = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )
    found = re.search(r"fork refused after (\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    # 30, and one more for "more than 30" (and one for bwrap's init where it has the uid).
    assert 29 <= int(found.group(1)) <= 31, done.stdout
    assert _left_running(process_name) == []


@pytest.mark.parametrize("where", ["sandbox", "no sandbox"])
def test_a_fork_bomb_is_stopped_at_the_process_limit(request, where: str, process_name: str):
    runner = (
        request.getfixturevalue("sandbox") if where == "sandbox" else Unsandboxed(sys.executable)
    )
    status, reason = _run_limited(runner, FORK_BOMB.format(tag=process_name), max_processes=40)
    assert status == "failed"
    assert reason.startswith("stopped: more than 40 processes"), reason
    assert _left_running(process_name) == []
    # The machine, and the runner, go on: the next snippet runs as ever.
    assert _run_limited(runner, "print('still here')") == ("passed", "")


@pytest.mark.parametrize("where", ["sandbox", "no sandbox"])
def test_children_holding_too_much_memory_in_all_are_stopped(
    request, where: str, process_name: str
):
    runner = (
        request.getfixturevalue("sandbox") if where == "sandbox" else Unsandboxed(sys.executable)
    )
    status, reason = _run_limited(
        runner, MEMORY_HOGS.format(tag=process_name), total_memory_mb=1024, memory_mb=1024
    )
    assert status == "failed"
    assert reason.startswith("stopped: more than 1024 MB of memory in all"), reason
    assert _left_running(process_name) == []


def test_where_a_cgroup_of_our_own_can_be_made_it_holds_the_tree(process_name: str):
    limits = TreeLimits(processes=40, total_memory_mb=1024)
    probe = SnippetCgroup.create(limits, overhead=0)
    if probe is None:
        pytest.skip("no cgroup v2 with the pids and memory controllers that this process may use")
    probe.remove()
    status, reason = _run_limited(
        Unsandboxed(sys.executable), FORK_BOMB.format(tag=process_name), max_processes=40
    )
    assert (status, reason.split(":")[0]) == ("failed", "stopped")
    assert reason.startswith("stopped: more than 40 processes"), reason
    assert _left_running(process_name) == []
    assert not glob.glob(str(probe.path.parent / "pitfalls-snippet-*")), "a cgroup left behind"
