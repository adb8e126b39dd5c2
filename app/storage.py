"""The database: engine, schema upgrades through Alembic, and every query the app makes.

Routes, CLI commands and ingest reach the tables only through the small keyword-only functions
here, so SQL stays in one place and stays portable between SQLite and PostgreSQL.
"""

import contextlib
import errno
import fcntl
import hashlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy import ColumnElement, Engine, event, func, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlmodel import Session, col, create_engine, delete, select

from app.matching import SignatureRecord
from app.matching.likely import EntryText
from app.models import (
    AppSecret,
    Change,
    Entry,
    Outcome,
    Revision,
    Signature,
    Snippet,
    Verification,
    utcnow,
)
from app.rendering import markdown_section
from app.resources import resource_dir
from app.settings import Settings

if TYPE_CHECKING:
    from alembic.config import Config

    from app.entries import EntryDocument


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
FEED_LOCK_KEY = 0x7069746661_02  # change-feed writers: sequence order is commit order


FEED_WRITTEN = "pitfalls_feed_written"  # Session.info flag: this transaction wrote a change


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


def upgrade_schema(engine: Engine) -> None:
    """Create or upgrade the schema to the newest migration (a no-op when already there)."""
    from alembic import command

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


# ---- reading -------------------------------------------------------------------------------


def get_entry(session: Session, entry_id: str) -> Entry | None:
    return session.get(Entry, entry_id)


def lock_entry(session: Session, entry_id: str) -> Entry | None:
    """The entry, read to be written: on PostgreSQL the row stays locked until commit, so a
    second writer waits and then sees the revision the first made (SQLite has one writer)."""
    return session.get(Entry, entry_id, with_for_update=True, populate_existing=True)


def list_entries(session: Session, *, include_archived: bool = False) -> Sequence[Entry]:
    query = select(Entry).order_by(col(Entry.id))
    if not include_archived:
        query = query.where(col(Entry.archived).is_(False))
    return session.exec(query).all()


class FileState(NamedTuple):
    file_hash: str | None  # of the content file last ingested
    archived: bool
    edited: bool  # written in the wiki since then


def active_entry_ids(session: Session) -> set[str]:
    query = select(Entry.id).where(col(Entry.archived).is_(False))
    return set(session.exec(query).all())


def entry_file_states(session: Session) -> dict[str, FileState]:
    """What ingest needs to skip an unchanged file and to see a wiki edit it must not overwrite."""
    query = select(Entry.id, Entry.file_hash, Entry.archived, Entry.edited_since_ingest)
    return {row[0]: FileState(*row[1:]) for row in session.exec(query).all()}


def recent_entries(session: Session, *, limit: int) -> Sequence[Entry]:
    """The active entries changed most recently, newest first."""
    query = (
        select(Entry)
        .where(col(Entry.archived).is_(False))
        .order_by(col(Entry.updated_at).desc(), col(Entry.id))
        .limit(limit)
    )
    return session.exec(query).all()


ENTRY_ORDERS = {"title": func.lower(col(Entry.title)), "updated": col(Entry.updated_at)}


def entry_listing(
    session: Session,
    *,
    kind: str | None,
    order_by: str,
    descending: bool,
    offset: int,
    limit: int,
) -> tuple[Sequence[Entry], int]:
    """One page of the active entries (of one kind, or all) in `ENTRY_ORDERS` order, and how many
    there are in all; ties are broken by id, so pages never overlap."""
    where: list[ColumnElement[bool]] = [col(Entry.archived).is_(False)]
    if kind:
        where.append(col(Entry.kind) == kind)
    key = ENTRY_ORDERS[order_by]
    query = (
        select(Entry)
        .where(*where)
        .order_by(key.desc() if descending else key, col(Entry.id))
        .offset(offset)
        .limit(limit)
    )
    total = session.exec(select(func.count()).select_from(Entry).where(*where)).one()
    return session.exec(query).all(), total


def count_by_kind(session: Session) -> dict[str, int]:
    """How many active entries each kind has."""
    query = (
        select(Entry.kind, func.count())
        .where(col(Entry.archived).is_(False))
        .group_by(col(Entry.kind))
        .order_by(col(Entry.kind))
    )
    return {kind: count for kind, count in session.exec(query).all()}


def get_entries(session: Session, *, entry_ids: Sequence[str]) -> dict[str, Entry]:
    if not entry_ids:
        return {}
    rows = session.exec(select(Entry).where(col(Entry.id).in_(entry_ids))).all()
    return {row.id: row for row in rows}


def count_entries(session: Session) -> int:
    query = select(func.count()).select_from(Entry).where(col(Entry.archived).is_(False))
    return session.exec(query).one()


def entry_signatures(session: Session, *, entry_id: str) -> Sequence[Signature]:
    query = (
        select(Signature).where(Signature.entry_id == entry_id).order_by(col(Signature.position))
    )
    return session.exec(query).all()


def entry_snippets(session: Session, *, entry_id: str) -> Sequence[Snippet]:
    query = select(Snippet).where(Snippet.entry_id == entry_id).order_by(col(Snippet.position))
    return session.exec(query).all()


def active_signatures(session: Session) -> Sequence[Signature]:
    query = (
        select(Signature)
        .join(Entry, col(Entry.id) == col(Signature.entry_id))
        .where(col(Entry.archived).is_(False))
        .order_by(col(Signature.entry_id), col(Signature.position))
    )
    return session.exec(query).all()


def all_snippets(session: Session, *, entry_ids: Sequence[str] = ()) -> Sequence[Snippet]:
    """Snippets of the active entries (or of the ones named), in entry and position order."""
    query = (
        select(Snippet)
        .join(Entry, col(Entry.id) == col(Snippet.entry_id))
        .where(col(Entry.archived).is_(False))
        .order_by(col(Snippet.entry_id), col(Snippet.position))
    )
    if entry_ids:
        query = query.where(col(Snippet.entry_id).in_(entry_ids))
    return session.exec(query).all()


def latest_verifications(session: Session, *, entry_id: str) -> list[Verification]:
    """The newest result of each snippet of the entry, for the code and role it has now: a
    snippet changed in a revision (or turned from a fix into a repro) is unverified until run.
    Skips (stored by older versions of verify) are no results: they never hide a real one."""
    current = {s.position: s for s in entry_snippets(session, entry_id=entry_id)}
    query = (
        select(Verification)
        .where(Verification.entry_id == entry_id, Verification.status != "skipped")
        .order_by(col(Verification.verified_at).desc(), col(Verification.id).desc())
    )
    latest: dict[int, Verification] = {}
    for row in session.exec(query):
        snippet = current.get(row.snippet_position)
        if snippet is None or row.snippet_position in latest:
            continue
        if (
            hashlib.sha256(snippet.code.encode("utf-8")).hexdigest() == row.code_hash
            and snippet.role == row.role
        ):
            latest[row.snippet_position] = row
    return [latest[p] for p in sorted(latest)]


def active_signature_records(session: Session) -> list[SignatureRecord]:
    """What the matcher needs of every active signature."""
    return [
        SignatureRecord(
            entry_id=s.entry_id,
            position=s.position,
            message=s.message,
            example=s.example,
            exception=s.exception,
            frame=s.frame,
            context=s.context,
        )
        for s in active_signatures(session)
    ]


def active_entry_texts(session: Session) -> list[EntryText]:
    """What the likely tier reads of every active entry."""
    signatures: dict[str, list[Signature]] = {}
    for s in active_signatures(session):
        signatures.setdefault(s.entry_id, []).append(s)
    query = select(Entry).where(col(Entry.archived).is_(False)).order_by(col(Entry.id))
    return [
        EntryText.of(e, markdown_section(e.body_markdown, "What you see"), signatures.get(e.id, ()))
        for e in session.exec(query)
    ]


def list_revisions(session: Session, *, entry_id: str) -> Sequence[Revision]:
    query = select(Revision).where(Revision.entry_id == entry_id).order_by(col(Revision.number))
    return session.exec(query).all()


def get_revision(session: Session, *, entry_id: str, number: int) -> Revision | None:
    query = select(Revision).where(Revision.entry_id == entry_id, Revision.number == number)
    return session.exec(query).first()


def count_revisions(session: Session, *, entry_id: str) -> int:
    query = select(func.count()).select_from(Revision).where(Revision.entry_id == entry_id)
    return session.exec(query).one()


def current_markdown(session: Session, *, entry: Entry) -> str:
    query = select(Revision.markdown).where(
        Revision.entry_id == entry.id, Revision.number == entry.revision
    )
    return session.exec(query).one()


def current_change_seq(session: Session) -> int:
    return session.exec(select(func.coalesce(func.max(Change.seq), 0))).one() or 0


class FeedMark(NamedTuple):
    """How many changes the feed holds and its highest sequence number: a cache that has applied
    as many changes as there are, up to the same number, has missed none (sequence numbers have
    gaps, where a transaction rolled back, so the highest number alone cannot tell)."""

    count: int  # type: ignore[assignment]  # shadows tuple.count(), which nothing calls
    seq: int


def feed_mark(session: Session) -> FeedMark:
    row = session.exec(select(func.count(), func.coalesce(func.max(Change.seq), 0))).one()
    return FeedMark(int(row[0]), int(row[1] or 0))


class ContentMark(NamedTuple):
    """Everything a reader's page can show moves this: the change feed (entries, revisions), the
    outcome reports (a new one, or one replaced: its time is then the newest) and the verify
    results. Equal marks mean equal pages, so a cached page is served only under its mark."""

    feed: FeedMark
    outcome_id: int
    outcome_at: str
    verification_id: int


def content_mark(session: Session) -> ContentMark:
    """Read in one statement (one snapshot), each part by an index or a key."""
    scalar = select(func.count()).select_from(Change).scalar_subquery()
    row = session.exec(
        select(  # type: ignore[call-overload]  # sqlmodel types select() for at most 4 columns
            scalar,
            select(func.coalesce(func.max(Change.seq), 0)).scalar_subquery(),
            select(func.coalesce(func.max(Outcome.id), 0)).scalar_subquery(),
            select(func.max(Outcome.created_at)).scalar_subquery(),
            select(func.coalesce(func.max(Verification.id), 0)).scalar_subquery(),
        )
    ).one()
    return ContentMark(
        FeedMark(int(row[0]), int(row[1])), int(row[2]), str(row[3] or ""), int(row[4])
    )


def _feed_count():
    return select(func.count()).select_from(Change).scalar_subquery()


def newest_change_numbers(session: Session, *, window: int) -> tuple[int, list[int]]:
    """The feed's count and the numbers within `window` of its highest, read in one statement
    (one snapshot: a change committing meanwhile is in both or in neither)."""
    top = select(func.coalesce(func.max(Change.seq), 0)).scalar_subquery()
    query = (
        select(Change.seq, _feed_count())
        .where(col(Change.seq) > top - window)
        .order_by(col(Change.seq))
    )
    rows = session.exec(query).all()
    return (int(rows[0][1]) if rows else 0), [int(row[0] or 0) for row in rows]


def changes_and_count(session: Session, *, seq: int) -> tuple[list[Change], int]:
    """The changes after `seq` and the feed's count, read in one statement."""
    query = select(Change, _feed_count()).where(col(Change.seq) > seq).order_by(col(Change.seq))
    rows = session.exec(query).all()
    if not rows:
        return [], feed_mark(session).count
    return [row[0] for row in rows], int(rows[0][1])


def changes_since(session: Session, *, seq: int) -> Sequence[Change]:
    query = select(Change).where(col(Change.seq) > seq).order_by(col(Change.seq))
    return session.exec(query).all()


# ---- writing (the caller commits: one transaction per logical change) ------------------------


def _record_change(
    session: Session, *, entry_id: str, action: str, revision: int | None, actor: str
) -> None:
    """The change row is the last write of its transaction. On PostgreSQL, a sequence number is
    handed out at insert and seen at commit, so two writers could commit in the reverse order of
    their numbers and a reader that follows `seq > last` would skip the late one: writers take a
    transaction-level advisory lock first, which makes number order the commit order (SQLite
    already has one writer at a time). Catch-up also re-reads a window: see app.search.index."""
    session.info[FEED_WRITTEN] = True  # this process's caches look again at commit
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": FEED_LOCK_KEY})
        # Delivered at commit, to every replica listening (app.change_feed.FeedFollower).
        session.execute(text("SELECT pg_notify('pitfalls_changes', :e)"), {"e": entry_id})
    session.add(Change(entry_id=entry_id, action=action, revision=revision, actor=actor))


def _replace_parts(session: Session, *, doc: "EntryDocument") -> None:
    assert doc.front is not None and doc.rendered is not None
    entry_id = doc.front.id
    session.exec(delete(Signature).where(col(Signature.entry_id) == entry_id))
    session.exec(delete(Snippet).where(col(Snippet.entry_id) == entry_id))
    for position, sig in enumerate(doc.front.signatures):
        session.add(
            Signature(
                entry_id=entry_id,
                position=position,
                exception=sig.exception,
                message=sig.message,
                frame=sig.frame,
                context=sig.context,
                example=sig.example,
            )
        )
    for position, snippet in enumerate(doc.rendered.snippets):
        session.add(
            Snippet(
                entry_id=entry_id,
                position=position,
                role=snippet.role,
                options=snippet.options,
                code=snippet.code,
                line=doc.body_line + snippet.line,
            )
        )


class EntryExists(Exception):
    """A create found its id taken."""

    def __init__(self, entry_id: str) -> None:
        super().__init__(f"an entry with id {entry_id!r} already exists")
        self.entry_id = entry_id


def save_entry(
    session: Session,
    *,
    doc: "EntryDocument",
    author: str,
    source: str,
    message: str = "",
    file_hash: str | None = None,
    create: bool = False,
) -> str:
    """Store `doc` as a new entry or a new revision of it; return the change action.

    With `create`, only a new entry: `EntryExists` when the id is taken, also by a create that
    committed a moment ago in another process (the primary key decides, not the read).
    """
    assert doc.ok and doc.front is not None and doc.rendered is not None
    front = doc.front
    entry = session.get(Entry, front.id)
    now = utcnow()
    if entry is not None and create:
        raise EntryExists(front.id)
    if entry is None:
        action = "create"
        entry = Entry(id=front.id, revision=1, created_at=now, **_entry_fields(doc))
        session.add(entry)
        try:
            session.flush()
        except IntegrityError:
            session.rollback()  # a create is a transaction of its own: nothing else is lost
            raise EntryExists(front.id) from None
    else:
        action = "restore" if entry.archived else "update"
        entry.sqlmodel_update(_entry_fields(doc))
        entry.revision += 1
        entry.archived = False
    entry.updated_at = now
    if file_hash is not None:
        entry.file_hash = file_hash
    entry.edited_since_ingest = source != "ingest"
    session.add(entry)
    session.flush()  # the entry row must exist before rows that reference it
    _replace_parts(session, doc=doc)
    session.add(
        Revision(
            entry_id=entry.id,
            number=entry.revision,
            markdown=doc.markdown,
            content_hash=doc.content_hash,
            author=author,
            source=source,
            message=message,
            created_at=now,
        )
    )
    _record_change(session, entry_id=entry.id, action=action, revision=entry.revision, actor=author)
    return action


def _entry_fields(doc: "EntryDocument") -> dict:
    assert doc.front is not None and doc.rendered is not None
    front = doc.front
    return {
        "title": front.title,
        "summary": front.summary,
        "kind": front.kind,
        "tags": list(front.tags),
        "aliases": list(front.aliases),
        "questions": list(front.questions),
        "versions": front.versions,
        "related": list(front.related),
        "sources": list(front.sources),
        "body_markdown": doc.body,
        "body_html": doc.rendered.html,
        "content_hash": doc.content_hash,
    }


def archive_entry(
    session: Session, *, entry: Entry, actor: str, source: str, message: str = ""
) -> None:
    """Take an entry out of search and matching; its history stays. With a `message` (why), the
    archive is a revision of its own, with the same text, so the history says who and why."""
    now = utcnow()
    if message:
        current = get_revision(session, entry_id=entry.id, number=entry.revision)
        assert current is not None
        entry.revision += 1
        session.add(
            Revision(
                entry_id=entry.id,
                number=entry.revision,
                markdown=current.markdown,
                content_hash=current.content_hash,
                author=actor,
                source=source,
                message=message,
                created_at=now,
            )
        )
    entry.archived = True
    entry.updated_at = now
    entry.edited_since_ingest = source != "ingest"
    session.add(entry)
    _record_change(
        session, entry_id=entry.id, action="archive", revision=entry.revision, actor=actor
    )


def delete_entry(session: Session, *, entry: Entry, actor: str) -> None:
    session.delete(entry)  # revisions, signatures and snippets go with it (ON DELETE CASCADE)
    _record_change(session, entry_id=entry.id, action="delete", revision=None, actor=actor)


def shared_secret(engine: Engine, *, name: str, candidate: str) -> str:
    """The secret `name` as every process sees it: `candidate` if none is stored yet (the
    first process to store one wins; the others read the winner's)."""
    with Session(engine) as session:
        stored = session.get(AppSecret, name)
        if stored is not None:
            return stored.value
        session.add(AppSecret(name=name, value=candidate))
        try:
            session.commit()
            return candidate
        except IntegrityError:
            session.rollback()
    with Session(engine) as session:
        stored = session.get(AppSecret, name)
        assert stored is not None
        return stored.value


def record_verification(session: Session, *, result: Verification) -> None:
    session.add(result)
