"""A start that cannot happen says why in one sentence and exits 2, with no traceback.

Each case runs the real `pitfalls` command against the real obstacle: a data dir the user cannot
write, a PostgreSQL port nobody listens on, a PostgreSQL URL without its driver, and the set-up
lock held by another process on a real PostgreSQL server.
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from app.storage import SETUP_LOCK_KEY
from tests.conftest import REPO, free_port, pitfalls_command, require


def _run(args, cwd, env_extra, *, drop: bool = False, python_prelude: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.update(env_extra)
    if python_prelude is not None:
        code = f"{python_prelude}\nimport sys\nfrom app.cli import main\nsys.argv = {['pitfalls', *args]!r}\nmain()"
        command = [sys.executable, "-c", code]
        env["PYTHONPATH"] = str(REPO)
    else:
        command = [pitfalls_command(), *args]
    if drop:
        command = [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search,-fowner",
            "--",
            *command,
        ]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _one_sentence(result, *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pitfalls: cannot start: "), lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.slow  # starts real processes
def test_a_data_dir_this_user_cannot_write():
    # A folder every user can enter (pytest's own are private to root), with a data dir in it
    # that only its owner may write: the usual bind mount that the container's user meets.
    folder = Path(tempfile.mkdtemp(prefix="pitfalls-ro-"))
    try:
        folder.chmod(0o755)
        data = folder / "data"
        data.mkdir(mode=0o755)
        as_root = os.geteuid() == 0
        if as_root:
            # root writes anywhere: give the folder to another user and drop the capabilities
            # that let root ignore permissions (the interpreter may live in root's home, so
            # switching users outright could not even start Python)
            require(shutil.which("setpriv") is not None, "setpriv is needed to drop root's powers")
            os.chown(data, pwd.getpwnam("nobody").pw_uid, -1)
        else:
            data.chmod(0o555)
        result = _run(["ingest"], folder, {"PITFALLS_DATA_DIR": str(data)}, drop=as_root)
        _one_sentence(result, str(data), f"uid {os.getuid()}", "PITFALLS_DATA_DIR")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow  # starts real processes
def test_a_database_nobody_listens_on(tmp_path):
    url = f"postgresql+psycopg://someone:secret@127.0.0.1:{free_port()}/pitfalls"
    result = _run(["ingest"], tmp_path, {"PITFALLS_DATABASE_URL": url})
    line = _one_sentence(result, "cannot reach the database", "PITFALLS_DATABASE_URL")
    assert "secret" not in line  # the password is never printed


@pytest.mark.slow  # starts real processes
def test_a_postgresql_url_without_its_driver(tmp_path):
    url = f"postgresql+psycopg://someone@127.0.0.1:{free_port()}/pitfalls"
    result = _run(
        ["ingest"],
        tmp_path,
        {"PITFALLS_DATABASE_URL": url},
        python_prelude="import sys\nsys.modules['psycopg'] = None  # as if never installed",
    )
    _one_sentence(result, 'pip install "pitfalls[postgres]"')


@pytest.mark.slow  # starts real processes
def test_the_setup_lock_held_past_the_timeout(tmp_path, postgres_server):
    with postgres_server.database() as url:
        holder = create_engine(url)
        with holder.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": SETUP_LOCK_KEY})
            connection.commit()
            result = _run(
                ["ingest"],
                tmp_path,
                {"PITFALLS_DATABASE_URL": url, "PITFALLS_SETUP_LOCK_TIMEOUT_S": "0.5"},
            )
            connection.invalidate()
        holder.dispose()
    _one_sentence(result, "over 0.5 s", "PITFALLS_SETUP_LOCK_TIMEOUT_S")


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_content_that_passes_check_always_stores(make_settings, content_dir, backend):
    """What `check` refuses never reaches the database: an id over the column, a long exception
    name, a NUL; and what it accepts stores on PostgreSQL as it does on SQLite."""
    from app import storage
    from app.ingest import ingest_content
    from tests.conftest import entry_text

    long_id = "a" * 101
    (content_dir / f"{long_id}.md").write_text(entry_text(long_id), encoding="utf-8")
    (content_dir / "long-exception.md").write_text(
        entry_text(
            "long-exception",
            signatures="signatures:\n  - exception: "
            + "E" * 255
            + "\n    message: 'boom'\n    example: 'boom'\n",
        ),
        encoding="utf-8",
    )
    (content_dir / "nul-body.md").write_text(
        entry_text("nul-body").replace("Because.", "Be\x00cause."), encoding="utf-8"
    )
    (content_dir / "fine-entry.md").write_text(entry_text("fine-entry"), encoding="utf-8")
    settings = make_settings(content_dir)
    engine = storage.create_db_engine(settings)
    storage.upgrade_schema(engine)
    report = ingest_content(engine, content_dir)
    problems = "\n".join(str(p) for p in report.problems)
    assert "over the 100 the database holds" in problems
    assert "over the 200 the database holds" in problems
    assert "NUL character" in problems
    assert report.changed_ids == ["fine-entry"]
    engine.dispose()
