"""A first start: the steps it reports, and the snapshot that makes the next one quick.

In process: a fresh data dir started from a snapshot holds the same entries, signatures,
snippets, revisions, change feed, verification results and search answers as one that did the
whole work, and did none of that work itself; a snapshot is never kept or used where it would
not be the same. End to end: a real `pitfalls serve` on a fresh data dir prints its steps in
order and a ready line whose address answers; its second start prints only that line.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlmodel import Session

from app.bootstrap import StartStep, build_shipped_snapshot, prepare_data
from app.cli import cli
from app.cli.start_progress import StartProgress
from app.models import AppSecret
from app.search import SearchService
from app.settings import load_settings
from app.snapshots import find_snapshot, keep_snapshot, shipped_snapshot_dir, snapshot_key
from app.storage import create_db_engine
from tests.conftest import Served, entry_text, get

QUERIES = ("view", "failure number", "gradient", "alpha")
ROWS = {
    "entry": "SELECT id, revision, title, summary, kind, body_html, content_hash, archived "
    "FROM entry ORDER BY id",
    "signature": "SELECT entry_id, position, exception, message, frame, example FROM signature "
    "ORDER BY entry_id, position",
    "snippet": "SELECT entry_id, position, role, code, line FROM snippet ORDER BY entry_id, position",
    "revision": "SELECT entry_id, number, content_hash, author, source FROM revision "
    "ORDER BY entry_id, number",
    "change": 'SELECT seq, entry_id, action, revision FROM "change" ORDER BY seq',
    "verification": "SELECT entry_id, snippet_position, code_hash, status FROM verification "
    "ORDER BY entry_id, snippet_position",
}


def _content(folder: Path) -> Path:
    folder.mkdir()
    words = {"view-entry": "view", "grad-entry": "gradient", "alpha-entry": "alpha"}
    for entry_id, word in words.items():
        (folder / f"{entry_id}.md").write_text(
            entry_text(entry_id, title=f"A pitfall about {word} number {len(word)}"),
            encoding="utf-8",
        )
    return folder


def _rows(engine) -> dict:
    with engine.connect() as connection:
        return {
            table: [tuple(row) for row in connection.execute(text(sql))]
            for table, sql in ROWS.items()
        }


def _start(tmp_path: Path, name: str, content: Path, snapshots: Path):
    settings = load_settings(data_dir=tmp_path / name, content_dir=content)
    steps: list[StartStep] = []
    engine = create_db_engine(settings)
    try:
        report = prepare_data(settings, engine, on_step=steps.append, snapshots=snapshots)
        rows = _rows(engine)
    finally:
        engine.dispose()
    assert settings.index_dir is not None
    service = SearchService(settings.index_dir)
    try:
        answers = {
            query: [(hit.id, round(hit.score, 6)) for hit in service.search(query).hits]
            for query in QUERIES
        }
    finally:
        service.close()
    return settings, report, steps, rows, answers


def test_a_snapshot_start_equals_the_slow_one_and_does_none_of_its_work(tmp_path):
    content = _content(tmp_path / "content")
    snapshots = tmp_path / "snapshots"
    _, slow, slow_steps, slow_rows, slow_answers = _start(tmp_path, "a", content, snapshots)
    assert slow.ingest is not None and slow.ingest.counts["create"] == 3 and slow.index_rebuilt
    assert [s.name for s in slow_steps if s.finished] == ["database", "ingest", "index"]
    assert slow_steps[-1] == StartStep("snapshot", f"kept for the next first start, in {snapshots}")

    settings, fast, fast_steps, fast_rows, fast_answers = _start(tmp_path, "b", content, snapshots)
    assert [s.name for s in fast_steps] == ["snapshot"]  # no migration, ingest or index step
    assert fast_steps[0].detail.startswith("copied from the first start of these entries")
    assert fast.migrations == [] and not fast.index_rebuilt
    assert fast.ingest is not None and fast.ingest.changed == 0
    assert fast.ingest.counts["unchanged"] == 3
    assert fast_rows == slow_rows and all(slow_rows[t] for t in ("entry", "signature", "change"))
    assert fast_answers == slow_answers and slow_answers["gradient"][0][0] == "grad-entry"
    # The copy is the data dir's own: a write there leaves the snapshot as it was.
    engine = create_db_engine(settings)
    with Session(engine) as session:
        session.add(AppSecret(name="session", value="x" * 40))
        session.commit()
    engine.dispose()
    key = snapshot_key(settings)
    found = find_snapshot(snapshots, key)
    assert found is not None
    with create_db_engine(
        load_settings(database_url=f"sqlite:///{found.folder / 'pitfalls.db'}")
    ).connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM app_secret")).scalar() == 0


def test_the_key_follows_every_entry_file(tmp_path):
    content = _content(tmp_path / "content")
    settings = load_settings(data_dir=tmp_path / "data", content_dir=content)
    before = snapshot_key(settings)
    assert snapshot_key(settings) == before
    (content / "verification.json").write_text('{"format": 1, "results": []}\n')
    shipped = snapshot_key(settings)
    path = content / "alpha-entry.md"
    path.write_text(path.read_text().replace("Because.", "Because of it."))
    assert len({before, shipped, snapshot_key(settings)}) == 3
    other = load_settings(data_dir=tmp_path / "data", content_dir=content, search_engine="tantivy")
    assert snapshot_key(other) != snapshot_key(settings)


def test_no_snapshot_is_kept_with_rows_the_entries_did_not_make(tmp_path):
    content = _content(tmp_path / "content")
    settings = load_settings(data_dir=tmp_path / "data", content_dir=content)
    engine = create_db_engine(settings)
    prepare_data(settings, engine)  # no snapshots folder: nothing kept
    with Session(engine) as session:
        session.add(AppSecret(name="session", value="y" * 40))
        session.commit()
    engine.dispose()
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    assert not keep_snapshot(settings, snapshots, snapshot_key(settings))
    assert list(snapshots.iterdir()) == []


def test_a_started_data_dir_is_never_replaced_by_a_snapshot(tmp_path):
    content = _content(tmp_path / "content")
    snapshots = tmp_path / "snapshots"
    _start(tmp_path, "a", content, snapshots)  # keeps one
    _, again, steps, _, _ = _start(tmp_path, "a", content, snapshots)
    assert steps == [] and again.ingest is not None and again.ingest.changed == 0


def test_progress_in_a_log_is_a_line_per_quarter_and_on_a_terminal_one_redrawn_line():
    class Stream(list):
        def write(self, text: str) -> None:
            self.append(text)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    steps = [StartStep("ingest", "reading", done=n, total=8) for n in range(1, 9)]
    log = Stream()
    progress = StartProgress(log)  # type: ignore[arg-type]
    for step in steps:
        progress(step)
    lines = "".join(log).splitlines()
    assert lines == [f"ingest: reading {n}/8 entries" for n in (1, 2, 4, 6, 8)]
    terminal = Stream()
    drawn = StartProgress(terminal, tty=True)  # type: ignore[arg-type]
    for step in steps:
        drawn(step)
    drawn.ready("http://127.0.0.1:1/")
    out = "".join(terminal)
    assert out.count("\n") == 2 and out.count("\r") == 8
    assert out.endswith("[" + "#" * 30 + "]\nready at http://127.0.0.1:1/\n")


# ---- end to end: a real `pitfalls serve` ------------------------------------------------------

STEP_LINE = re.compile(r"^(snapshot|database|ingest|verification|index): ", re.M)


@contextmanager
def _serving(
    folder: Path, settings: dict[str, str] | None = None, fresh: bool = True, own_key=False
):
    """`running_server`, with room for a first start on a busy machine: its whole work.
    `own_key`: one more file among the entries, so that no snapshot `pitfalls snapshot` made
    for this checkout's entries can serve the start."""
    served = Served(folder, settings, fresh)
    if own_key:
        (folder / "content" / "not-the-shipped-entries.txt").write_text("test\n")
    try:
        served.start()
        served.wait_ready(timeout=600)
        yield served.base
    finally:
        served.stop()


def _log_once_ready(tmp_path: Path, name: str) -> str:
    """The server's log, once its ready line is in it (the server answers a moment before the
    line that says so is written)."""
    (path,) = tmp_path.glob(f"serve-{name}-*.log")
    for _ in range(600):
        log = path.read_text()
        if "\nready at " in log:
            return log
        time.sleep(0.05)
    return path.read_text()


def _ready_address(log: str) -> str:
    found = re.findall(r"^ready at (http://\S+)$", log, re.M)
    assert len(found) == 1, log
    return found[0]


@pytest.mark.e2e
def test_serve_tells_each_step_of_a_first_start_then_only_where_it_answers(tmp_path):
    folder = tmp_path / "clone"
    with _serving(folder) as base:
        log = _log_once_ready(tmp_path, "clone")
        first_health = json.loads(get(base + "/api/v1/health")[1])
    order = [
        "database: applying ",
        " migration(s) (0001_initial_schema … ",
        "database: ready (",
        "ingest: reading 1/",
        "ingest: storing ",
        "index: building (none yet)",
        "index: ready (",
        "ready at ",
    ]
    at = [log.index(line) for line in order]
    assert at == sorted(at), log
    entries = first_health["entries"]
    assert f"ingest: storing {entries}/{entries} entries (" in log
    address = _ready_address(log)
    assert address == base + "/"
    for old in tmp_path.glob("serve-*.log"):
        old.unlink()

    with _serving(folder, fresh=False) as base:
        again = _log_once_ready(tmp_path, "clone")
        status, body = get(_ready_address(again) + "api/v1/health")
    assert status == 200, body
    assert STEP_LINE.findall(again) == [], again
    health = json.loads(body)
    # Nothing ingested and the index not rebuilt: the same feed, the same build.
    assert health["change_seq"] == first_health["change_seq"]
    assert health["index"]["built_at"] == first_health["index"]["built_at"]


@pytest.mark.e2e
def test_serve_from_a_snapshot_answers_as_the_slow_start_did(tmp_path):
    snapshots = tmp_path / "snapshots"
    settings = {"PITFALLS_FIRST_START_SNAPSHOTS": str(snapshots)}
    queries = ("num_batches_tracked", "显存", "contiguous", "FloatTensor")

    def answers(base: str) -> dict:
        found = {}
        for query in queries:
            found[query] = json.loads(get(f"{base}/api/v1/search?q={quote(query)}")[1])["hits"]
        return found

    with _serving(tmp_path / "first", settings, own_key=True) as base:
        slow = answers(base)
        slow_entries = json.loads(get(base + "/api/v1/entries?per_page=100")[1])
    log = _log_once_ready(tmp_path, "first")
    assert f"snapshot: kept for the next first start, in {snapshots}" in log, log
    with _serving(tmp_path / "second", settings, own_key=True) as base:
        fast = answers(base)
        fast_entries = json.loads(get(base + "/api/v1/entries?per_page=100")[1])
    log = _log_once_ready(tmp_path, "second")
    steps = STEP_LINE.findall(log)
    assert steps == ["snapshot"], log
    assert fast == slow and all(slow.values())
    assert fast_entries == slow_entries
    shutil.rmtree(snapshots)


# ---- the snapshot an installation ships (`pitfalls snapshot`) ---------------------------------


def _start_shipped(tmp_path: Path, name: str, content: Path, shipped: Path):
    """A machine's very first start: an empty user snapshot folder, then the shipped one."""
    settings = load_settings(data_dir=tmp_path / name, content_dir=content)
    user = tmp_path / f"user-cache-{name}"
    steps: list[StartStep] = []
    engine = create_db_engine(settings)
    try:
        prepare_data(settings, engine, on_step=steps.append, snapshots=user, shipped=shipped)
        rows = _rows(engine)
    finally:
        engine.dispose()
    return steps, rows, user


def test_a_shipped_snapshot_serves_a_machines_first_start_and_any_change_misses_it(tmp_path):
    content = _content(tmp_path / "content")
    shipped = tmp_path / "package-first-start"
    settings = load_settings(data_dir=tmp_path / "unused", content_dir=content)
    found, report = build_shipped_snapshot(settings, shipped)
    assert found is not None and report.ingest is not None and report.ingest.changed == 3
    assert [p.name for p in shipped.iterdir()] == [snapshot_key(settings)]

    _, _, _, slow_rows, _ = _start(tmp_path, "slow", content, tmp_path / "elsewhere")
    steps, rows, user = _start_shipped(tmp_path, "first", content, shipped)
    assert [s.name for s in steps] == ["snapshot"]  # copied: no migration, ingest or index step
    assert rows == slow_rows
    assert not user.exists() or list(user.iterdir()) == []  # nothing kept: it was a copy

    # An entry edited after the build: the shipped snapshot is a miss, never a near match.
    path = content / "alpha-entry.md"
    path.write_text(path.read_text().replace("Because.", "Because of it."))
    steps, rows, user = _start_shipped(tmp_path, "edited", content, shipped)
    assert "ingest" in [s.name for s in steps] and "snapshot" in [s.name for s in steps]
    assert [p.name for p in user.iterdir()] == [snapshot_key(settings)]  # kept for the user
    assert [p.name for p in shipped.iterdir()] != [snapshot_key(settings)]  # shipped untouched

    # Building again keeps the new one only: the folder ships one snapshot.
    found, _ = build_shipped_snapshot(settings, shipped)
    assert found is not None and [p.name for p in shipped.iterdir()] == [snapshot_key(settings)]


def test_the_shipped_folder_is_not_part_of_the_key(tmp_path):
    settings = load_settings(data_dir=tmp_path / "data", content_dir=_content(tmp_path / "c"))
    before = snapshot_key(settings)
    folder = shipped_snapshot_dir()
    made = not folder.exists()
    marker = folder / f"test-{time.time_ns()}" / "snapshot.json"
    marker.parent.mkdir(parents=True)
    try:
        marker.write_text("{}\n")
        assert snapshot_key(settings) == before
    finally:
        shutil.rmtree(marker.parent)
        if made:
            shutil.rmtree(folder, ignore_errors=True)


def test_the_snapshot_command_says_what_it_kept_and_refuses_a_broken_entry(tmp_path):
    content = _content(tmp_path / "content")
    into = tmp_path / "into"
    env = {"PITFALLS_CONTENT_DIR": str(content), "PITFALLS_DATA_DIR": str(tmp_path / "data")}
    result = CliRunner().invoke(cli, ["snapshot", "--into", str(into)], env=env)
    assert result.exit_code == 0, result.output
    settings = load_settings(data_dir=tmp_path / "data", content_dir=content)
    assert f"snapshot {snapshot_key(settings)[:12]} of {content} (whoosh) kept in {into}" in (
        result.output
    )
    assert not (tmp_path / "data").exists()  # made in a temporary data dir, not the settings'

    (content / "broken-entry.md").write_text("---\ntitle: [unclosed\n---\n")
    result = CliRunner().invoke(cli, ["snapshot", "--into", str(into)], env=env)
    assert result.exit_code == 1
    assert "broken-entry.md" in result.output
    assert f"no snapshot kept in {into}: the first start was not clean" in result.output


def test_a_wheels_layout_of_the_same_code_has_the_clones_key(tmp_path):
    """A wheel carries content, migrations, templates and static inside the package, where a
    clone keeps them beside it: a snapshot made in the clone before the wheel was built must be
    the one the installed wheel looks for."""
    from tests.conftest import REPO

    wheel = tmp_path / "site"
    shutil.copytree(REPO / "app", wheel / "app", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("content", "migrations", "templates", "static"):
        shutil.copytree(REPO / name, wheel / "app" / name)
    code = (
        "import sys; from app.settings import load_settings; from app.snapshots import "
        "snapshot_key; import app; assert app.__file__.startswith(sys.argv[1]), app.__file__; "
        "print(snapshot_key(load_settings(data_dir=sys.argv[2])))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PYTHONPATH"] = str(wheel)
    key = subprocess.run(
        [sys.executable, "-c", code, str(wheel), str(tmp_path / "data")],
        cwd=tmp_path,  # no ./content here: the package's own entries
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    clone = load_settings(data_dir=tmp_path / "data", content_dir=REPO / "content")
    assert key == snapshot_key(clone)
