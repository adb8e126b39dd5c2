"""The change feed's rows: its mark (how many changes, the highest number), the content mark
of a reader's page, the changes after a number, and the one function that writes a change."""

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import func, text
from sqlmodel import Session, col, select

from app.feed_mark import FeedMark
from app.models import Change, Outcome, Verification

__all__ = ["FeedMark"]  # defined in app.feed_mark, kept importable from here

# A PostgreSQL advisory lock key (a 64-bit number no other program on the database uses).
FEED_LOCK_KEY = 0x7069746661_02  # change-feed writers: sequence order is commit order


FEED_WRITTEN = "pitfalls_feed_written"  # Session.info flag: this transaction wrote a change


def current_change_seq(session: Session) -> int:
    return session.exec(select(func.coalesce(func.max(Change.seq), 0))).one() or 0


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
