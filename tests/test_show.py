"""`pitfalls show ID` as a user runs it: a real subprocess of the CLI on a prepared data dir, into
a pipe (plain text, every code block kept, no escape codes) and into a real terminal (a pty:
highlighted), `--json`, an unknown id, and the same entry from a running server."""

import json
import os
import pty
import re
import subprocess
import sys

import pytest
from sqlmodel import Session

from app import storage
from app.settings import Settings
from app.storage import create_db_engine

pytestmark = pytest.mark.e2e

PITFALLS = [sys.executable, "-c", "from app.cli import main; main()"]
ANSI = re.compile(r"\x1b\[")
# A line of view-non-contiguous's `python fix` block, and its Reproduce section's fence.
FIX_LINE = "b = y.contiguous().view(2, -1)  # same result, explicit copy"


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.pop("NO_COLOR", None)
    env["PITFALLS_DATA_DIR"] = str(settings.data_dir)
    env["PITFALLS_CONTENT_DIR"] = str(settings.content_dir)
    return env


def _show(settings: Settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PITFALLS, "show", *args], capture_output=True, text=True, env=_env(settings)
    )


def _on_a_terminal(settings: Settings, *args: str) -> str:
    """What `pitfalls show` writes when its standard output is a terminal."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*PITFALLS, "show", *args], stdout=follower, stderr=subprocess.PIPE, env=_env(settings)
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes when the command exits
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 0, errors
    return b"".join(chunks).decode("utf-8")


def test_show_prints_the_whole_entry_with_its_code_and_no_escape_codes_in_a_pipe(
    real_settings,
):
    result = _show(real_settings, "view-non-contiguous")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert not ANSI.search(out)
    lines = out.splitlines()
    assert lines[0] == "view() fails on a non-contiguous tensor after transpose or permute"
    assert lines[1].startswith("view-non-contiguous · error · tags: tensor")
    for heading in ("## What you see", "## Why it happens", "## Fix", "## Reproduce"):
        assert heading in lines, heading
    assert "```python fix" in lines and FIX_LINE in lines
    assert "```python repro" in lines
    # Every code block comes through whole: as many fences open as the entry's body has.
    body = (real_settings.content_dir / "view-non-contiguous.md").read_text().split("\n---\n", 1)
    assert out.count("```") == body[1].count("```")


def test_show_highlights_code_on_a_terminal(real_settings):
    shown = _on_a_terminal(real_settings, "view-non-contiguous")
    assert ANSI.search(shown)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown).replace("\r\n", "\n")
    assert FIX_LINE in plain.splitlines()  # the same code, coloured


def test_show_json_unknown_and_archived_ids(real_settings):
    as_json = _show(real_settings, "view-non-contiguous", "--json")
    assert as_json.returncode == 0
    entry = json.loads(as_json.stdout)
    assert entry["id"] == "view-non-contiguous" and FIX_LINE in entry["markdown"]
    unknown = _show(real_settings, "no-such-entry")
    assert unknown.returncode == 1 and unknown.stdout == ""
    message = unknown.stderr.strip()
    assert message == (
        "Error: there is no entry 'no-such-entry'; `pitfalls search WORDS` finds entries"
    )
    engine = create_db_engine(real_settings)
    with Session(engine) as session:
        entry = storage.get_entry(session, "backward-twice")
        assert entry is not None
        storage.archive_entry(session, entry=entry, actor="tests", source="tests")
        session.commit()
    engine.dispose()
    archived = _show(real_settings, "backward-twice")
    assert archived.returncode == 1 and "'backward-twice' is archived" in archived.stderr


def test_show_asks_a_server_with_the_same_answer(server, real_settings):
    base, _folder = server  # one server for the tests that only read
    local = _show(real_settings, "backward-twice")
    remote = _show(real_settings, "backward-twice", "--server", base)
    missing = _show(real_settings, "no-such-entry", "--server", base)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout + f"On the site: {base}/entries/backward-twice\n"
    assert missing.returncode == 1 and f"no entry 'no-such-entry' on {base}" in missing.stderr
    unreachable = _show(real_settings, "backward-twice", "--server", "http://127.0.0.1:9")
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr


def test_server_commands_send_pitfalls_token_as_the_api_token(tmp_path):
    """`show`, `search` and `match` with --server send PITFALLS_TOKEN (a private site's reading
    needs one), to a real HTTP server here that writes down what it was sent."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str | None]] = []
    answers = {
        "/api/v1/entries/some-entry": {"id": "some-entry", "title": "T", "markdown": "body"},
        "/api/v1/match": {"message": "No known pitfall matches this error.", "matches": [],
                          "related": []},
        "/api/v1/search": {"total": 0, "hits": []},
    }  # fmt: skip

    class Answering(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            path = self.path.split("?")[0]
            seen.append((path, self.headers.get("Authorization")))
            if self.command == "POST":
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps(answers.get(path, {})).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answering)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PITFALLS_TOKEN"] = "pf_secret"
    try:
        for args in (["show", "some-entry"], ["search", "view"], ["match"]):
            done = subprocess.run(
                [*PITFALLS, *args, "--server", base],
                input="RuntimeError: boom\n",
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
            )
            assert done.returncode in (0, 1), done.stderr
    finally:
        server.shutdown()
        server.server_close()
    assert {path for path, _ in seen} == set(answers)
    assert all(token == "Bearer pf_secret" for _, token in seen), seen
