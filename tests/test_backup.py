"""Backup and restore on SQLite and on a real PostgreSQL server: every table comes back.

The source is a served wiki with users, tokens, login sessions, throttle counts, the audit log,
edits, an archived entry and verification results. A backup restored into a new database equals
the source table by table; one taken while a writer keeps saving is one moment of the source
(a prefix of the burst, every row of it equal to the source's); a database that holds anything,
and a file that is not a backup, are refused with a sentence and nothing written.
"""

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlmodel import Session

from app import storage
from app.backup import BackupError, backup, restore, table_rows
from app.cli import cli
from app.entries import parse_entry
from app.models import Verification
from app.search import SearchService
from app.search.index import rebuild_index
from tests import test_wiki
from tests.conftest import entry_text
from tests.test_sessions import _login

pytestmark = pytest.mark.both_databases

wiki = test_wiki.wiki


@contextmanager
def empty_database(backend: str, request, tmp_path: Path) -> Iterator:
    """A new, migrated, empty database of the same kind as the source."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'restored.db'}"
        engine = storage.create_db_engine(_settings(url, tmp_path))
        storage.upgrade_schema(engine)
        yield engine
        engine.dispose()
        return
    with request.getfixturevalue("postgres_server").database() as url:
        engine = storage.create_db_engine(_settings(url, tmp_path))
        storage.upgrade_schema(engine)
        yield engine
        engine.dispose()


def _settings(url: str, tmp_path: Path):
    from app.settings import load_settings

    return load_settings(data_dir=tmp_path / "restored-data", database_url=url)


def _populate(wiki) -> None:
    client = wiki.login("alice")
    headers = wiki.bearer("ci-bot")
    current = wiki.client.get("/api/v1/entries/first-entry", headers=headers)
    edited = current.json()["markdown"].replace("One sentence", "Edited sentence")
    saved = wiki.client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": edited, "message": "edit"},
        headers={**headers, "If-Match": current.headers["etag"]},
    )
    assert saved.status_code == 200
    assert wiki.client.delete("/api/v1/entries/third-entry", headers=headers).status_code in (
        200,
        204,
    )
    assert _login(wiki.anonymous(), "bob", "wrong password").status_code == 401
    with Session(wiki.engine) as session:
        session.add(
            Verification(
                entry_id="second-entry",
                snippet_position=0,
                role="fix",
                code_hash="0" * 64,
                status="passed",
                python_version="3.11",
                platform="linux",
            )
        )
        session.commit()
    assert client.get("/").status_code == 200


def test_a_backup_restores_to_a_database_equal_to_the_source(wiki, backend, request, tmp_path):
    _populate(wiki)
    source = table_rows(wiki.engine)
    for table in ("account", "api_token", "login_session", "login_throttle", "audit_event"):
        assert source[table], f"the source has no {table} rows to compare"
    assert any(row["archived"] for row in source["entry"])
    file = tmp_path / "backup.jsonl.gz"
    counts = backup(wiki.engine, file)
    assert counts == {name: len(rows) for name, rows in source.items() if rows}
    with empty_database(backend, request, tmp_path) as target:
        assert restore(target, file) == counts
        assert table_rows(target) == source
        # New rows continue after the restored ids (PostgreSQL's sequences were moved).
        with Session(target) as session:
            doc = parse_entry(entry_text("after-restore"), "after-restore.md")
            storage.save_entry(session, doc=doc, author="t", source="api")
            session.commit()
        index_dir = tmp_path / "restored-index"
        rebuild_index(target, index_dir)
        hits = SearchService(index_dir, target).search("sample", highlights=False).hits
        assert {"first-entry", "second-entry", "after-restore"} <= {h.id for h in hits}
        with pytest.raises(BackupError, match="already holds rows"):
            restore(target, file)


def test_a_backup_taken_during_a_write_burst_is_one_moment(wiki, backend, request, tmp_path):
    stop = threading.Event()
    written: list[str] = []

    def burst() -> None:
        n = 0
        while not stop.is_set() or n < 10:
            entry_id = f"burst-{n:04d}"
            with Session(wiki.engine) as session:
                doc = parse_entry(entry_text(entry_id), f"{entry_id}.md")
                storage.save_entry(session, doc=doc, author="burst", source="api")
                session.commit()
            written.append(entry_id)
            n += 1

    thread = threading.Thread(target=burst)
    thread.start()
    while len(written) < 5:
        stop.wait(0.01)
    file = tmp_path / "during.jsonl.gz"
    backup(wiki.engine, file)
    stop.set()
    thread.join()
    source = table_rows(wiki.engine)
    with empty_database(backend, request, tmp_path) as target:
        restore(target, file)
        restored = table_rows(target)
    kept = sorted(r["id"] for r in restored["entry"] if r["id"].startswith("burst-"))
    assert kept == [f"burst-{n:04d}" for n in range(len(kept))], "not one moment: a gap"
    assert 5 <= len(kept) < len(written), (len(kept), len(written))
    later = {f"burst-{n:04d}" for n in range(len(kept), len(written))}
    for name, rows in source.items():
        expected = [r for r in rows if not (r.get("entry_id") in later or r.get("id") in later)]
        assert restored[name] == expected, f"table {name} is not the source at one moment"


def test_the_cli_refuses_what_is_not_a_backup_and_writes_nothing(backend, request, tmp_path):
    junk = tmp_path / "junk.gz"
    with gzip.open(junk, "wt") as out:
        out.write(json.dumps({"hello": "world"}) + "\n")
    with empty_database(backend, request, tmp_path) as target:
        env = {"PITFALLS_DATABASE_URL": target.url.render_as_string(hide_password=False)}
        env["PITFALLS_DATA_DIR"] = str(tmp_path / "cli-data")
        result = CliRunner().invoke(cli, ["restore", str(junk)], env=env)
        assert result.exit_code == 2 and "not a pitfalls backup" in result.output
        assert all(not rows for rows in table_rows(target).values())
