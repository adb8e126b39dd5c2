"""The database itself: the engine, what its failures mean for a reply, the set-up lock that
lets one process at a time migrate and ingest, and the schema's upgrades through Alembic."""

import contextlib
import errno
import fcntl
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlmodel import create_engine

from app.resources import resource_dir
from app.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config


def create_db_engine(settings: Settings) -> Engine:
    """An engine for the configured database; a SQLite file's folder is created on first use."""
    url = make_url(settings.database_url)
    # Sized for the threads that may each hold one (the thread pool's 40, the paste and search
    # limiters): a full pool makes a request wait `db_pool_timeout_s`, then 503.
    pool = {
        "pool_size": settings.db_pool_size,
        "max_overflow": settings.db_pool_size,
        "pool_timeout": settings.db_pool_timeout_s,
    }
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **pool)
    if not url.database or url.database == ":memory:":
        pool = {}  # one connection per thread (SQLAlchemy's own choice for a memory database)
    else:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"timeout": settings.sqlite_busy_timeout_ms / 1000}, **pool
    )
    busy_timeout = int(settings.sqlite_busy_timeout_ms)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout}")
        cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; fsync at checkpoints
        cursor.close()

    return engine


# What a database failure looks like when it is the server's state, not a bug: the database is
# down or unreachable, its disk is full, it is busy past every wait. Matched in the driver's
# message (SQLite's and psycopg's wordings).
_UNREACHABLE = re.compile(
    r"connection (?:refused|failed|is closed|reset|timed out)|could not connect|server closed"
    r"|terminating connection|the database system is (?:starting up|shutting down)"
    r"|no route to host|name or service not known|unable to open database file"
    r"|consuming input failed|server conn crashed|SSL SYSCALL error",
    re.IGNORECASE,
)
_DISK_FULL = re.compile(
    r"database or disk is full|no space left on device|could not extend file|disk I/O error"
    r"|disk quota exceeded",
    re.IGNORECASE,
)
_BUSY = re.compile(r"database is locked|database table is locked", re.IGNORECASE)
DISK_FULL_MESSAGE = "The server's disk is full; nothing was saved. Tell whoever runs it."


def database_problem(error: BaseException) -> str | None:
    """A sentence for a failure of the database itself (down, disk full, busy, pool full), for a
    503; None for anything else, which is a bug and stays a 500."""
    from sqlalchemy.exc import InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(error, PoolTimeout):
        return "Every database connection is busy; try again in a few seconds."
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return DISK_FULL_MESSAGE
    if not isinstance(error, OperationalError | InterfaceError):
        return None
    text = str(error.orig if getattr(error, "orig", None) is not None else error)
    if _DISK_FULL.search(text):
        return DISK_FULL_MESSAGE
    if _BUSY.search(text):
        return "The database is busy with other writes; nothing was saved, try again."
    if _UNREACHABLE.search(text) or isinstance(error, InterfaceError):
        return "The database cannot be reached right now; try again in a minute."
    return None


# PostgreSQL advisory lock keys (any two 64-bit numbers no other program on the database uses).
SETUP_LOCK_KEY = 0x7069746661_01  # migrations, the first ingest, shipped results: one process


class SetupLockTimeout(Exception):
    """Another process held the set-up lock for longer than the configured wait."""


@contextlib.contextmanager
def setup_lock(engine: Engine, *, timeout_s: float) -> Iterator[None]:
    """Held while the schema is migrated and content is ingested, so that N processes starting
    together on one database do it one at a time: the first does the work, the others find it
    done. PostgreSQL: a session advisory lock waited for at most `timeout_s` (lock_timeout).
    SQLite: an exclusive lock on a file beside the database."""
    url = engine.url
    if url.get_backend_name() == "postgresql":
        with engine.connect() as connection:
            connection.exec_driver_sql(f"SET lock_timeout = {int(timeout_s * 1000)}")
            try:
                connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": SETUP_LOCK_KEY})
            except DBAPIError as exc:
                connection.invalidate()  # never back to the pool with this session's settings
                raise SetupLockTimeout(
                    f"another process has been migrating or ingesting for over {timeout_s:g} s"
                ) from exc
            connection.commit()
            try:
                yield
            finally:
                # The lock belongs to the database session: a pooled connection that kept it
                # would hold every other process out, so the connection is dropped instead.
                connection.invalidate()
        return
    if not url.database or url.database == ":memory:":
        yield
        return
    lock_path = Path(url.database + ".setup-lock")
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def alembic_config() -> "Config":
    from alembic.config import Config  # imported when the schema is touched, not on every start

    config = Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    return config


_REVISION_LINE = re.compile(
    r"^(down_revision|revision)\s*(?::[^=]*)?=\s*['\"]?([\w]+|None)['\"]?", re.M
)


def head_revision() -> str | None:
    """The newest migration, read from the files' `revision`/`down_revision` lines without
    importing Alembic: the revision that no other one revises."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in resource_dir("migrations").joinpath("versions").glob("*.py"):
        for kind, value in _REVISION_LINE.findall(path.read_text(encoding="utf-8")):
            (revisions if kind == "revision" else revised).add(value)
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 else None


def schema_is_current(engine: Engine) -> bool:
    """True when the database is at the newest migration: then a reader need not take the
    set-up lock or load Alembic (a CLI command answers sooner)."""
    head = head_revision()
    if head is None:
        return False
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    except Exception:  # no table yet, or no database: the full set-up decides
        return False
    return [row[0] for row in rows] == [head]


def pending_migrations(engine: Engine) -> list[str]:
    """The migrations an upgrade would apply, oldest first, as their file names without `.py`
    (`0001_initial_schema`); empty when the schema is current, found without Alembic."""
    if schema_is_current(engine):
        return []
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_heads()
    pending = list(script.iterate_revisions("heads", current or "base"))
    pending.reverse()  # iterate_revisions walks from the head down
    return [Path(revision.path).stem for revision in pending]


def upgrade_schema(engine: Engine) -> None:
    """Create or upgrade the schema to the newest migration (a no-op when already there)."""
    from alembic import command

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
