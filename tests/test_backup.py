"""Backup and restore on SQLite and on a real PostgreSQL server: every table comes back.

The source is a served wiki with users, tokens, login sessions, throttle counts, the audit log,
edits, an archived entry and verification results. A backup restored into a new database equals
the source table by table; one taken while a writer keeps saving is one moment of the source
(a prefix of the burst, every row of it equal to the source's); a database that holds anything,
and a file that is not a backup, are refused with a sentence and nothing written. So is a file
that does not add up: cut at a line boundary, only its header, a changed byte, a dropped row,
a row of an unknown table, random bytes, and a 100 MB line (refused after reading at most the
line limit); a version 1 file (no end marker) only with --accept-unverified.
"""

import gzip
import hashlib
import json
import os
import random
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlmodel import Session

from app import storage
from app.backup import MAX_LINE_BYTES, BackupError, backup, restore, table_rows
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


def _lines(file: Path) -> list[bytes]:
    with gzip.open(file, "rb") as lines:
        return lines.read().splitlines(keepends=True)


def _write(file: Path, lines: list[bytes]) -> Path:
    with gzip.open(file, "wb") as out:
        out.writelines(lines)
    return file


def _with_marker(rows: list[bytes], counts: dict[str, int]) -> list[bytes]:
    """`rows` (the header first) ended by a marker whose checksum is right for them."""
    digest = hashlib.sha256(b"".join(rows)).hexdigest()
    marker = {"end": "pitfalls-backup", "counts": counts, "sha256": digest}
    return [*rows, (json.dumps(marker) + "\n").encode()]


def _hostile_files(good: Path, folder: Path) -> dict[str, tuple[Path, str | tuple[str, ...]]]:
    """Files made from a good backup that must all be refused: (file, what the error says)."""
    lines = _lines(good)
    header, rows, marker = lines[0], lines[1:-1], json.loads(lines[-1])
    assert len(rows) > 20 and marker["end"] == "pitfalls-backup"
    flipped = bytearray(b"".join(lines))
    at = flipped.index(b'"first-entry"') + 2
    flipped[at] ^= 0x01  # "girst-entry": still valid JSON, a row of a known table
    compressed = bytearray(good.read_bytes())
    compressed[len(compressed) // 2] ^= 0xFF
    (folder / "flipped-gzip.gz").write_bytes(bytes(compressed))
    (folder / "random.gz").write_bytes(random.Random(7).randbytes(4096))
    unknown = json.dumps({"t": "no_such_table", "r": {"id": 1}}).encode() + b"\n"
    old_header = json.loads(header) | {"version": 1}
    return {
        "cut": (_write(folder / "cut.gz", lines[: len(lines) // 2]), "cut short"),
        "header only": (_write(folder / "header.gz", [header]), "cut short"),
        "a flipped byte": (_write(folder / "flip.gz", [bytes(flipped)]), "checksum"),
        # Where inflating notices depends on the byte: gzip's CRC, or a line that is not JSON.
        "a flipped byte of the gzip": (folder / "flipped-gzip.gz", ("gzip", "backup line")),
        "a dropped row": (
            _write(folder / "dropped.gz", _with_marker([header, *rows[1:]], marker["counts"])),
            "the end marker counts",
        ),
        "an unknown table": (
            _write(folder / "unknown.gz", _with_marker([header, *rows, unknown], {})),
            "unknown table 'no_such_table'",
        ),
        "random bytes": (folder / "random.gz", "not a whole gzip file"),
        "random lines": (
            _write(folder / "random-lines.gz", [header, random.Random(8).randbytes(2000)]),
            "not a backup line",
        ),
        "lines after the end": (_write(folder / "after.gz", [*lines, rows[0]]), "after the end"),
        "version 1": (
            _write(folder / "v1.gz", [json.dumps(old_header).encode() + b"\n", *rows]),
            "--accept-unverified",
        ),
    }


def _cli_restore(target, tmp_path: Path, file: Path, *args: str):
    env = {"PITFALLS_DATABASE_URL": target.url.render_as_string(hide_password=False)}
    env["PITFALLS_DATA_DIR"] = str(tmp_path / "cli-data")
    return CliRunner().invoke(cli, ["restore", str(file), *args], env=env)


def test_a_backup_that_does_not_add_up_is_refused_and_nothing_is_written(
    wiki, backend, request, tmp_path
):
    _populate(wiki)
    source = table_rows(wiki.engine)
    good = tmp_path / "good.jsonl.gz"
    backup(wiki.engine, good)
    hostile = _hostile_files(good, tmp_path)
    with empty_database(backend, request, tmp_path) as target:
        for case, (file, says) in hostile.items():
            result = _cli_restore(target, tmp_path, file)
            assert result.exit_code == 2, (case, result.output)
            assert any(s in result.output for s in ([says] if isinstance(says, str) else says)), (
                case,
                result.output,
            )
            assert result.output.startswith("Error: ") and result.output.count("\n") == 1, (
                case,
                result.output,
            )
            assert all(not rows for rows in table_rows(target).values()), case
        # An old file restores when told to; the good one then still round-trips exactly.
        old, _ = hostile["version 1"]
        assert _cli_restore(target, tmp_path, old, "--accept-unverified").exit_code == 0
        assert table_rows(target) == source
    with empty_database(backend, request, tmp_path / "again") as target:
        result = _cli_restore(target, tmp_path, good)
        assert result.exit_code == 0, result.output
        assert table_rows(target) == source


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_100_mb_line_is_refused_after_reading_at_most_the_limit(backend, request, tmp_path):
    line_bytes = 100 * 1024 * 1024
    file = tmp_path / "huge.gz"
    with empty_database(backend, request, tmp_path) as target:
        with target.connect() as connection:
            schema = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            header = {"format": "pitfalls-backup", "version": 2, "schema": schema.scalar_one()}
        with gzip.open(file, "wb", compresslevel=1) as out:
            out.write(json.dumps(header).encode() + b"\n")
            out.write(b'{"t": "entry", "r": {"id": "')
            chunk = b"x" * (1024 * 1024)
            for _ in range(line_bytes // len(chunk)):
                out.write(chunk)
            out.write(b'"}}\n')
        assert os.path.getsize(file) < line_bytes // 100
        tracemalloc.start()
        try:
            with pytest.raises(BackupError, match="a line longer than") as refused:
                restore(target, file)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert str(refused.value).startswith(f"{file}:2: a line longer than")
        assert peak < 3 * MAX_LINE_BYTES < line_bytes, f"{peak:,} bytes held at once"
        result = _cli_restore(target, tmp_path, file)
        assert result.exit_code == 2 and "a line longer than" in result.output, result.output
        assert all(not rows for rows in table_rows(target).values())
