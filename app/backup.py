"""Backup and restore: every table, as one consistent snapshot, in a portable file.

The file is gzip-compressed JSON lines: a header (format, version, the schema's migration, the
tables), then one line per row, table by table in foreign-key order. It is read in one snapshot
transaction (REPEATABLE READ on PostgreSQL, one read transaction on SQLite's WAL), so a backup
taken while people write is the database as it was at one moment. The same file restores into
SQLite or PostgreSQL, whichever made it: it is also the way from one to the other.

`restore` refuses a database that holds anything, and a file of another schema migration; it
writes everything in one transaction (nothing half-restored), moves PostgreSQL's id sequences
past the restored ids, and the caller then rebuilds the search index.
"""

import gzip
import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, DateTime, Engine, Integer, Table, func, select, text
from sqlmodel import SQLModel

from app import models  # registers every table on SQLModel.metadata

FORMAT = "pitfalls-backup"
VERSION = 1
BATCH = 500


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
    """The backup's lines, each with its table (empty for the header)."""
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


def backup(engine: Engine, path: Path) -> dict[str, int]:
    """Write the backup to `path` (whole or not at all); return rows per table."""
    counts: dict[str, int] = {}
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with gzip.open(partial, "wt", encoding="utf-8") as out:
            for name, line in dump_lines(engine):
                if name:
                    counts[name] = counts.get(name, 0) + 1
                out.write(line + "\n")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return counts


def _read(path: Path) -> Iterator[dict]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BackupError(f"{path}:{number}: not a backup line ({exc.msg})") from None
    except (OSError, EOFError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise BackupError(f"{path}: no such file") from None
        raise BackupError(f"{path}: not a gzip backup file ({exc})") from None


def restore(engine: Engine, path: Path) -> dict[str, int]:
    """Load a backup into an empty database at the same schema migration; return rows per
    table. Raises BackupError, and then nothing was written."""
    lines = _read(path)
    header = next(lines, None)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise BackupError(f"{path}: not a pitfalls backup (no header)")
    if header.get("version") != VERSION:
        raise BackupError(f"{path}: backup format {header.get('version')}, this reads {VERSION}")
    by_name = {t.name: t for t in tables()}
    counts: dict[str, int] = {}
    with engine.begin() as connection:
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
        pending: list[dict] = []
        current: Table | None = None
        for item in lines:
            table = by_name.get(item.get("t")) if isinstance(item, dict) else None
            if table is None:
                raise BackupError(f"{path}: a row of an unknown table {item.get('t')!r}")
            if current is not None and table is not current and pending:
                connection.execute(current.insert(), pending)
                pending = []
            current = table
            pending.append(_decode(table, item["r"]))
            counts[table.name] = counts.get(table.name, 0) + 1
            if len(pending) >= BATCH:
                connection.execute(table.insert(), pending)
                pending = []
        if current is not None and pending:
            connection.execute(current.insert(), pending)
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
