"""Getting a data dir ready: schema upgraded, content ingested, index current.

`pitfalls serve`, `pitfalls ingest` and the app's start-up all go through here, so a fresh clone
needs no set-up command of its own.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from app import storage
from app.settings import Settings

if TYPE_CHECKING:
    from app.ingest import IngestReport
    from app.search.index import IndexState


@dataclass
class PrepareReport:
    ingest: "IngestReport | None"
    index: "IndexState | None"


def database_is_empty(engine: Engine) -> bool:
    with Session(engine) as session:
        return storage.current_change_seq(session) == 0


def prepare_data(
    settings: Settings,
    engine: Engine,
    *,
    ingest: Literal["always", "if-empty", "never"] = "always",
    prune: bool = False,
    force: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> PrepareReport:
    """Upgrade the schema, sync content/ as asked, and bring the index up to the database.

    The writes happen under the set-up lock: N processes started together on one database
    migrate and ingest one at a time, and the ones after the first find nothing left to do.
    The index is each process's own and is brought up to date outside the lock."""
    # Imported here: a command that only reads (`pitfalls match`) never needs them.
    from app.ingest import ingest_content
    from app.search.index import remove_dead_builds, update_index
    from app.shipped_results import SHIPPED_RESULTS_NAME, load_shipped_results

    report = None
    with storage.setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
        storage.upgrade_schema(engine)
        if ingest == "always" or (ingest == "if-empty" and database_is_empty(engine)):
            assert settings.content_dir is not None
            report = ingest_content(
                engine, settings.content_dir, prune=prune, force=force, on_progress=on_progress
            )
        if settings.content_dir is not None:
            # Results shipped next to the entries, for snippets whose code is still the same.
            load_shipped_results(engine, settings.content_dir / SHIPPED_RESULTS_NAME)
    assert settings.index_dir is not None
    index = update_index(engine, settings.index_dir, settings.search_engine)
    remove_dead_builds(settings.index_dir)  # what a killed `reindex` left behind
    return PrepareReport(ingest=report, index=index)


def prepare_to_read(settings: Settings, engine: Engine) -> None:
    """For a command that reads and matches but never searches (`pitfalls match`, the hook):
    nothing to do when the schema is current and the database holds entries, which is checked
    without the set-up lock, Alembic or the search index; otherwise the full preparation."""
    if storage.schema_is_current(engine) and not database_is_empty(engine):
        return
    prepare_data(settings, engine, ingest="if-empty")


def startup_problem(exc: BaseException, settings: Settings) -> str | None:
    """The one sentence that tells an operator what to do about a failed start, or None when
    `exc` is not one of the failures a start can meet (a bug: the traceback is then wanted)."""
    uid = os.getuid()
    if isinstance(exc, storage.SetupLockTimeout):
        return (
            f"{exc}; if no other process is starting, look for one that hangs, or raise "
            "PITFALLS_SETUP_LOCK_TIMEOUT_S"
        )
    if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.startswith("psycopg"):
        return (
            "PITFALLS_DATABASE_URL names PostgreSQL, but its driver is not installed: "
            'pip install "pitfalls[postgres]"'
        )
    if isinstance(exc, PermissionError):
        where = exc.filename or settings.data_dir
        return (
            f"cannot write {where} as uid {uid}: give the data dir to this user "
            f"(chown -R {uid} {settings.data_dir}) or set PITFALLS_DATA_DIR to a folder it can "
            "write"
        )
    if isinstance(exc, OperationalError):
        detail = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        if settings.is_sqlite:
            return (
                f"cannot open the SQLite database in {settings.data_dir} as uid {uid} "
                f"({detail}): make the data dir writable by this user or set PITFALLS_DATA_DIR"
            )
        url = make_url(settings.database_url).render_as_string(hide_password=True)
        return (
            f"cannot reach the database {url} ({detail}): is the server running and reachable "
            "from here, and are PITFALLS_DATABASE_URL's user, password and database right?"
        )
    return None
