"""Backup and restore: every table, as one consistent snapshot, in a portable file.

The file is gzip-compressed JSON lines: a header (format, version, the schema's migration, the
tables), then one line per row, table by table in foreign-key order, then an end marker with the
rows per table and the SHA-256 of every line before it. It is read in one snapshot transaction
(REPEATABLE READ on PostgreSQL, one read transaction on SQLite's WAL), so a backup taken while
people write is the database as it was at one moment. The same file restores into SQLite or
PostgreSQL, whichever made it: it is also the way from one to the other.

`restore` reads the whole file once before it writes anything, and refuses one that does not add
up: cut short (no end marker: a copy that stopped at a line boundary looks whole otherwise),
counts or checksum that differ, a line that is not a row of a known table, a line longer than
any backup writes (read with a limit, never whole). It refuses a database that holds anything,
and a file of another schema migration; it writes everything in one transaction (nothing
half-restored), moves PostgreSQL's id sequences past the restored ids, and the caller then
rebuilds the search index. A version 1 file (made before the end marker) cannot be told from a
cut one, and is read only when the caller accepts that (`accept_unverified`).
"""

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Generator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, DateTime, Engine, Integer, Table, func, select, text
from sqlalchemy.exc import DBAPIError, StatementError
from sqlmodel import SQLModel

from app import models  # registers every table on SQLModel.metadata

FORMAT = "pitfalls-backup"
VERSION = 2
UNVERIFIED_VERSION = 1  # no end marker: a file cut at a line boundary reads as whole
BATCH = 500
# Far above any row (an entry is at most 128 KB of Markdown; its rendered HTML and revisions are
# rows of their own), far below what a hostile file could make us hold.
MAX_LINE_BYTES = 16 * 1024 * 1024


class BackupError(Exception):
    """The file cannot be restored here; the message says why and what to do."""


def tables() -> list[Table]:
    """Every table of the schema, parents before children."""
    return list(SQLModel.metadata.sorted_tables)


def schema_revision(connection: Connection) -> str:
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _decode(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in row.items():
        column = table.c[name]
        if value is not None and isinstance(column.type, DateTime | models.UtcDateTime):
            value = datetime.fromisoformat(value)
        out[name] = value
    return out


def _snapshot(engine: Engine) -> Connection:
    """A connection whose reads all see one moment of the database."""
    if engine.url.get_backend_name() == "postgresql":
        connection = engine.connect().execution_options(isolation_level="REPEATABLE READ")
        connection.exec_driver_sql("SET TRANSACTION READ ONLY")
        return connection
    connection = engine.connect()
    # pysqlite begins a transaction only before a write; a read transaction must be asked for.
    connection.exec_driver_sql("BEGIN")
    return connection


def _ordered(table: Table):
    return select(table).order_by(*table.primary_key.columns)


def dump_lines(engine: Engine) -> Iterator[tuple[str, str]]:
    """The backup's lines, each with its table (empty for the header and the end marker)."""
    connection = _snapshot(engine)
    try:
        names = [t.name for t in tables()]
        header = {
            "format": FORMAT,
            "version": VERSION,
            "schema": schema_revision(connection),
            "dialect": engine.url.get_backend_name(),
            "tables": names,
        }
        yield "", json.dumps(header)
        for table in tables():
            for row in connection.execute(_ordered(table)).mappings():
                encoded = {k: _encode(v) for k, v in row.items()}
                yield table.name, json.dumps({"t": table.name, "r": encoded}, ensure_ascii=False)
    finally:
        connection.rollback()
        connection.close()


def _end_marker(counts: dict[str, int], digest: str) -> bytes:
    marker = {"end": FORMAT, "counts": counts, "sha256": digest}
    return (json.dumps(marker) + "\n").encode("utf-8")


def backup(engine: Engine, path: Path) -> dict[str, int]:
    """Write the backup to `path` (whole or not at all); return rows per table."""
    counts = {table.name: 0 for table in tables()}
    digest = hashlib.sha256()
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with gzip.open(partial, "wb") as out:
            for name, line in dump_lines(engine):
                data = (line + "\n").encode("utf-8")
                if len(data) > MAX_LINE_BYTES:
                    raise BackupError(
                        f"a row of table {name} is {len(data):,} bytes as a backup line, over "
                        f"the {MAX_LINE_BYTES:,} a restore reads"
                    )
                if name:
                    counts[name] += 1
                digest.update(data)
                out.write(data)
            out.write(_end_marker(counts, digest.hexdigest()))
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return {name: n for name, n in counts.items() if n}


class BackupFile:
    """A backup file as restore reads it: each line at most `max_line_bytes`, each one checked,
    and the whole file checked against its end marker once the last line is read."""

    def __init__(
        self,
        path: Path,
        *,
        accept_unverified: bool = False,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.path = path
        self.accept_unverified = accept_unverified
        self.max_line_bytes = max_line_bytes
        self.by_name = {t.name: t for t in tables()}

    def _lines(self) -> Generator[tuple[int, bytes]]:
        """(line number, bytes) for each line; never reads more than the limit at once."""
        try:
            with gzip.open(self.path, "rb") as file:
                number = 0
                while line := file.readline(self.max_line_bytes + 1):
                    number += 1
                    if len(line) > self.max_line_bytes:
                        raise BackupError(
                            f"{self.path}:{number}: a line longer than {self.max_line_bytes:,} "
                            "bytes, more than any backup writes: the file is not a pitfalls "
                            "backup or is damaged"
                        )
                    yield number, line
        except FileNotFoundError:
            raise BackupError(f"{self.path}: no such file") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise BackupError(
                f"{self.path}: not a whole gzip file ({exc}): the file is cut short, damaged, "
                "or not a pitfalls backup"
            ) from None

    def _json(self, number: int, line: bytes) -> Any:
        try:
            return json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise BackupError(f"{self.path}:{number}: not a backup line (not UTF-8 text)") from None
        except json.JSONDecodeError as exc:
            raise BackupError(f"{self.path}:{number}: not a backup line ({exc.msg})") from None

    def _check_header(self, header: Any) -> dict:
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise BackupError(f"{self.path}: not a pitfalls backup (no header)")
        version = header.get("version")
        if version == UNVERIFIED_VERSION and not self.accept_unverified:
            raise BackupError(
                f"{self.path}: a version {UNVERIFIED_VERSION} backup has no end marker or "
                "checksum, so a copy cut short cannot be told from a whole one: take a new "
                "backup with this version, or restore this one with --accept-unverified once "
                "you know it is whole"
            )
        if version not in (VERSION, UNVERIFIED_VERSION):
            raise BackupError(f"{self.path}: backup format {version}, this reads {VERSION}")
        return header

    def header(self) -> dict:
        """The first line, checked: a pitfalls backup of a version this reads."""
        lines = self._lines()
        try:
            first = next(lines, None)
        finally:
            lines.close()
        return self._check_header(None if first is None else self._json(*first))

    def _row(self, number: int, item: Any) -> tuple[Table, dict[str, Any]]:
        if not isinstance(item, dict) or not isinstance(item.get("r"), dict):
            raise BackupError(f"{self.path}:{number}: not a backup line (no table and row)")
        table = self.by_name.get(str(item.get("t")))
        if table is None:
            raise BackupError(f"{self.path}:{number}: a row of an unknown table {item.get('t')!r}")
        unknown = sorted(set(item["r"]) - set(table.c.keys()))
        if unknown:
            raise BackupError(
                f"{self.path}:{number}: a row of table {table.name} with unknown columns "
                f"{', '.join(map(str, unknown))}"
            )
        try:
            return table, _decode(table, item["r"])
        except (TypeError, ValueError) as exc:
            raise BackupError(
                f"{self.path}:{number}: a row of table {table.name} with a bad value ({exc})"
            ) from None

    def _check_end(self, number: int, marker: dict, counts: dict[str, int], digest: str) -> None:
        if marker.get("sha256") != digest:
            raise BackupError(
                f"{self.path}:{number}: the checksum does not match the lines before it: the "
                "file was changed or damaged after it was written"
            )
        said = marker.get("counts")
        if not isinstance(said, dict):
            raise BackupError(f"{self.path}:{number}: the end marker has no row counts")
        said = {name: n for name, n in said.items() if n}
        for name in sorted(set(said) | set(counts)):
            if said.get(name, 0) != counts.get(name, 0):
                raise BackupError(
                    f"{self.path}: the end marker counts {said.get(name, 0)} rows of table "
                    f"{name}, the file holds {counts.get(name, 0)}: the file is damaged"
                )

    def rows(self) -> Iterator[tuple[Table, dict[str, Any]]]:
        """Every row with its table, in file order. Raises BackupError at the first line that
        is wrong, and after the last row when the file does not add up."""
        digest = hashlib.sha256()
        counts: dict[str, int] = {}
        lines = self._lines()
        try:
            first = next(lines, None)
            header = self._check_header(None if first is None else self._json(*first))
            assert first is not None  # _check_header refused an empty file
            digest.update(first[1])
            number = first[0]
            for number, line in lines:
                item = self._json(number, line)
                if isinstance(item, dict) and "end" in item:
                    self._check_end(number, item, counts, digest.hexdigest())
                    if next(lines, None) is not None:
                        raise BackupError(f"{self.path}:{number + 1}: a line after the end marker")
                    return
                table, row = self._row(number, item)
                digest.update(line)
                counts[table.name] = counts.get(table.name, 0) + 1
                yield table, row
            if header["version"] == UNVERIFIED_VERSION:
                return  # accepted unverified: _check_header refused it otherwise
            raise BackupError(
                f"{self.path}: cut short: it ends after line {number} with no end marker (a "
                "copy or a backup that did not finish); take the backup again"
            )
        finally:
            lines.close()


def _check_target(connection: Connection, path: Path, header: dict) -> None:
    here = schema_revision(connection)
    if header.get("schema") != here:
        raise BackupError(
            f"{path}: made at schema migration {header.get('schema')}, this version is at "
            f"{here}: restore it with the version that made it, then upgrade"
        )
    for table in tables():
        if connection.execute(select(func.count()).select_from(table)).scalar_one():
            raise BackupError(
                f"the database already holds rows (table {table.name}): restore into a new, "
                "empty database (a new PITFALLS_DATA_DIR, or a new PostgreSQL database)"
            )


def _insert(connection: Connection, path: Path, table: Table, rows: list[dict]) -> None:
    try:
        connection.execute(table.insert(), rows)
    except (DBAPIError, StatementError) as exc:
        said = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise BackupError(
            f"{path}: rows of table {table.name} do not fit this database "
            f"({said[0] if said else type(exc).__name__})"
        ) from None


def restore(
    engine: Engine,
    path: Path,
    *,
    accept_unverified: bool = False,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> dict[str, int]:
    """Load a backup into an empty database at the same schema migration; return rows per
    table. Raises BackupError, and then nothing was written: the file is read and checked
    whole before the first row is written, and the rows are written in one transaction."""
    file = BackupFile(path, accept_unverified=accept_unverified, max_line_bytes=max_line_bytes)
    header = file.header()
    with engine.connect() as connection:
        _check_target(connection, path, header)
    for _ in file.rows():  # the whole file adds up, or this raises before anything is written
        pass
    counts: dict[str, int] = {}
    with engine.begin() as connection:
        _check_target(connection, path, header)
        pending: list[dict] = []
        current: Table | None = None
        # Read again, checked again: a file changed since the first pass rolls back here.
        for table, row in file.rows():
            if current is not None and table is not current and pending:
                _insert(connection, path, current, pending)
                pending = []
            current = table
            pending.append(row)
            counts[table.name] = counts.get(table.name, 0) + 1
            if len(pending) >= BATCH:
                _insert(connection, path, table, pending)
                pending = []
        if current is not None and pending:
            _insert(connection, path, current, pending)
        if engine.url.get_backend_name() == "postgresql":
            _advance_sequences(connection)
    return counts


def _advance_sequences(connection: Connection) -> None:
    """Rows came in with their ids: each id sequence must continue after the highest."""
    for table in tables():
        for column in table.primary_key.columns:
            if not isinstance(column.type, Integer):
                continue
            sequence = connection.execute(
                text("SELECT pg_get_serial_sequence(:t, :c)"),
                {"t": table.name, "c": column.name},
            ).scalar_one()
            if sequence is None:
                continue
            connection.execute(
                text(
                    f'SELECT setval(:s, COALESCE((SELECT MAX("{column.name}") FROM '
                    f'"{table.name}"), 1), (SELECT MAX("{column.name}") FROM "{table.name}") '
                    "IS NOT NULL)"
                ),
                {"s": sequence},
            )


def table_rows(engine: Engine) -> dict[str, list[dict]]:
    """Every row of every table, in key order, values as the backup writes them (for tests and
    for checking a restore by eye)."""
    with engine.connect() as connection:
        return {
            table.name: [
                {k: _encode(v) for k, v in row.items()}
                for row in connection.execute(_ordered(table)).mappings()
            ]
            for table in tables()
        }
