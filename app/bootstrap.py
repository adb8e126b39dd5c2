"""Getting a data dir ready: schema upgraded, content ingested, index current.

`pitfalls serve`, `pitfalls ingest` and the app's start-up all go through here, so a fresh clone
needs no set-up command of its own.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from app import storage
from app.settings import Settings
from app.snapshots import (
    Snapshot,
    find_snapshot,
    install_snapshot,
    is_fresh,
    keep_snapshot,
    remove_other_snapshots,
    snapshot_key,
)

if TYPE_CHECKING:
    from app.ingest import IngestReport
    from app.search.index import IndexState


@dataclass
class PrepareReport:
    ingest: "IngestReport | None"
    index: "IndexState | None"
    migrations: list[str] = field(default_factory=list)  # the ones this preparation applied
    index_rebuilt: bool = False


@dataclass(frozen=True)
class StartStep:
    """One step of getting a data dir ready, as it happens, for a face to show. Only steps
    that do work are told: a data dir that is already ready hears nothing."""

    name: Literal["snapshot", "database", "ingest", "verification", "index"]
    detail: str  # what is happening, or what happened, in words
    done: int = 0  # ingest: the files looked at so far, of `total`
    total: int = 0
    finished: bool = False  # the step's last word


def database_is_empty(engine: Engine) -> bool:
    with Session(engine) as session:
        return storage.current_change_seq(session) == 0


def _migrations_named(names: list[str]) -> str:
    if len(names) <= 2:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]}"


def prepare_data(
    settings: Settings,
    engine: Engine,
    *,
    ingest: Literal["always", "if-empty", "never"] = "always",
    prune: bool = False,
    force: bool = False,
    on_progress: Callable[[str], None] | None = None,
    on_step: Callable[[StartStep], None] | None = None,
    snapshots: Path | None = None,
    shipped: Path | None = None,
) -> PrepareReport:
    """Upgrade the schema, sync content/ as asked, and bring the index up to the database.

    The writes happen under the set-up lock: N processes started together on one database
    migrate and ingest one at a time, and the ones after the first find nothing left to do.
    The index is each process's own and is brought up to date outside the lock.
    `on_progress` hears each file ingest reads; `on_step` each step that does work.

    With a `snapshots` folder, a fresh SQLite data dir starts from the snapshot a first start
    of the same entries and code kept there, or keeps one for the next (see app.snapshots);
    `shipped` is a folder only looked in, after `snapshots` (the installation's own)."""
    # Imported here: a command that only reads (`pitfalls match`) never needs them.
    from app.ingest import ingest_content
    from app.search.index import remove_dead_builds, update_index
    from app.shipped_results import SHIPPED_RESULTS_NAME, load_shipped_results

    def tell(step: StartStep) -> None:
        if on_step is not None:
            on_step(step)

    report = None
    keep_as: str | None = None  # this first start may keep a snapshot under this key
    with storage.setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
        if snapshots is not None and settings.content_dir is not None and is_fresh(settings):
            keep_as = snapshot_key(settings)
            found = None
            for folder in (snapshots, shipped) if keep_as else ():
                found = find_snapshot(folder, keep_as) if folder is not None else None
                if found is not None:
                    break
            if found is not None and install_snapshot(settings, found):
                keep_as = None
                made = f"copied from the first start of these entries at {found.made_at}"
                tell(StartStep("snapshot", made, finished=True))
        pending = storage.pending_migrations(engine)
        if pending:
            named = _migrations_named(pending)
            tell(StartStep("database", f"applying {len(pending)} migration(s) ({named})"))
            storage.upgrade_schema(engine)
            tell(StartStep("database", "ready", finished=True))
        if ingest == "always" or (ingest == "if-empty" and database_is_empty(engine)):
            assert settings.content_dir is not None
            report = ingest_content(
                engine,
                settings.content_dir,
                prune=prune,
                force=force,
                on_progress=_counted(settings, engine, on_progress, tell),
                on_stored=_stored(engine, tell),
            )
        if settings.content_dir is not None:
            # Results shipped next to the entries, for snippets whose code is still the same.
            stored = load_shipped_results(engine, settings.content_dir / SHIPPED_RESULTS_NAME)
            if stored:
                detail = f"stored {stored} shipped result(s)"
                tell(StartStep("verification", detail, finished=True))
    assert settings.index_dir is not None
    rebuilt: list[str] = []

    def rebuilding(reason: str) -> None:
        rebuilt.append(reason)
        tell(StartStep("index", f"building ({reason})"))

    index = update_index(engine, settings.index_dir, settings.search_engine, on_rebuild=rebuilding)
    if rebuilt:
        tell(StartStep("index", "ready", finished=True))
    remove_dead_builds(settings.index_dir)  # what a killed `reindex` left behind
    clean = _clean_first_ingest(report)
    if keep_as and snapshots and clean and keep_snapshot(settings, snapshots, keep_as):
        tell(StartStep("snapshot", f"kept for the next first start, in {snapshots}"))
    return PrepareReport(
        ingest=report, index=index, migrations=pending, index_rebuilt=bool(rebuilt)
    )


def build_shipped_snapshot(
    settings: Settings, into: Path, *, on_step: Callable[[StartStep], None] | None = None
) -> tuple[Snapshot | None, PrepareReport]:
    """A first start of the entries of `settings` (with its search engine) in a temporary SQLite
    data dir, kept in `into`: what `pitfalls snapshot` runs where a wheel or an image is built,
    so that the installation's very first start copies instead. Any other snapshot in `into` is
    removed (the folder ships one). None when the start was not clean enough to keep."""
    import tempfile

    from app.settings import load_settings
    from app.storage import create_db_engine

    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pitfalls-snapshot-") as temp:
        fresh = load_settings(
            data_dir=Path(temp),
            database_url="",
            index_dir=Path(temp) / "index",
            content_dir=settings.content_dir,
            search_engine=settings.search_engine,
            first_start_snapshots=str(into),
        )
        key = snapshot_key(fresh)
        engine = create_db_engine(fresh)
        try:
            report = prepare_data(fresh, engine, on_step=on_step, snapshots=into)
        finally:
            engine.dispose()
    found = find_snapshot(into, key) if key else None
    if found is not None:
        remove_other_snapshots(into, keep=key)
    return found, report


def _clean_first_ingest(report: "IngestReport | None") -> bool:
    """Every file became a new entry, with nothing refused or reported."""
    if report is None or report.problems or not report.changed:
        return False
    return report.counts["create"] == report.changed and report.failed == 0


def _counted(
    settings: Settings,
    engine: Engine,
    on_progress: Callable[[str], None] | None,
    tell: Callable[[StartStep], None],
) -> Callable[[str], None] | None:
    """Ingest's per-file callback: `on_progress`, and on a first ingest (an empty database,
    where every file is read and written) a counted `ingest` step too."""
    from app.checker import collect_entry_files

    assert settings.content_dir is not None
    if not database_is_empty(engine) or not settings.content_dir.is_dir():
        return on_progress
    total = len(collect_entry_files([settings.content_dir]))
    done = 0

    def counted(label: str) -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(label)
        tell(StartStep("ingest", "reading", done=done, total=total))

    return counted


def _stored(engine: Engine, tell: Callable[[StartStep], None]) -> Callable[[int, int], None]:
    """Ingest's per-stored-file callback on a first ingest: the counted `ingest` step's second
    half. (Asked before ingest writes anything, so a later start stays quiet.)"""
    first = database_is_empty(engine)

    def stored(done: int, total: int) -> None:
        if first:
            tell(StartStep("ingest", "storing", done=done, total=total, finished=done == total))

    return stored


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
