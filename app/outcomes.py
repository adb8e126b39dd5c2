"""Did the fix work? Reports per (error fingerprint, entry), and the rates they make.

One report per voter (a user, a token, or an anonymous address) for each (fingerprint, entry): a
second report from the same voter replaces the first, so nobody stuffs the count. Anonymous
voters are throttled per address. The entry page and every answer show the measured rate
("fixed it for 14 of 16") and the notes of what did not work; signatures stay deterministic.
"""

import re
from datetime import timedelta

from pydantic import BaseModel
from sqlalchemy import Engine, case, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from app.models import Entry, Outcome, utcnow

FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")
MAX_NOTE = 500
ANONYMOUS_PER_HOUR = 20  # reports one address may make in an hour without a login or token
NOTES_SHOWN = 5


class OutcomeRefused(Exception):
    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


class OutcomeStats(BaseModel):
    worked: int = 0
    reports: int = 0
    failed_notes: list[str] = []  # what was tried when the fix did not help, newest first

    @property
    def text(self) -> str:
        return f"fixed it for {self.worked} of {self.reports}" if self.reports else ""


class OutcomeOut(BaseModel):
    fingerprint: str
    id: str
    worked: bool
    replaced: bool  # this voter had reported on this error and entry before
    for_this_error: OutcomeStats
    for_this_entry: OutcomeStats


def _clean(note: str) -> str:
    note = " ".join("".join(c if c.isprintable() else " " for c in note).split())
    return note[:MAX_NOTE]


def record_outcome(
    engine: Engine,
    *,
    fingerprint: str,
    id: str,
    worked: bool,
    note: str = "",
    voter: str,
) -> OutcomeOut:
    if not FINGERPRINT.match(fingerprint or ""):
        raise OutcomeRefused("fingerprint must be the 16 hex digits an answer gave")
    note = _clean(note)
    now = utcnow()
    with Session(engine) as session:
        entry = session.get(Entry, id)
        if entry is None or entry.archived:
            raise OutcomeRefused(f"there is no entry {id!r}", status=404)
        if voter.startswith("addr:"):
            recent = session.exec(
                select(func.count())
                .select_from(Outcome)
                .where(Outcome.voter == voter, col(Outcome.created_at) > now - timedelta(hours=1))
            ).one()
            if recent >= ANONYMOUS_PER_HOUR:
                raise OutcomeRefused(
                    f"at most {ANONYMOUS_PER_HOUR} reports an hour from one address without "
                    "a login or token; try again later",
                    status=429,
                )
        existing = _find(session, fingerprint, id, voter)
        replaced = existing is not None
        row = existing or Outcome(fingerprint=fingerprint, entry_id=id, voter=voter[:200])
        row.worked, row.note, row.created_at = worked, note, now
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # the same voter's report committed a moment ago: replace it
            session.rollback()
            row = _find(session, fingerprint, id, voter)
            assert row is not None
            row.worked, row.note, row.created_at = worked, note, now
            session.add(row)
            session.commit()
            replaced = True
        return OutcomeOut(
            fingerprint=fingerprint,
            id=id,
            worked=worked,
            replaced=replaced,
            for_this_error=stats(session, id, fingerprint=fingerprint),
            for_this_entry=stats(session, id),
        )


def _find(session: Session, fingerprint: str, entry_id: str, voter: str) -> Outcome | None:
    return session.exec(
        select(Outcome).where(
            Outcome.fingerprint == fingerprint,
            Outcome.entry_id == entry_id,
            Outcome.voter == voter,
        )
    ).first()


def stats(session: Session, entry_id: str, *, fingerprint: str | None = None) -> OutcomeStats:
    """The reports on an entry, for one error or for all: counted by the database, and only
    the newest few notes read (every answer and entry page asks, however many reports exist)."""
    where = [Outcome.entry_id == entry_id]
    if fingerprint is not None:
        where.append(Outcome.fingerprint == fingerprint)
    worked_count = func.coalesce(func.sum(case((col(Outcome.worked), 1), else_=0)), 0)
    reports, worked = session.exec(select(func.count(), worked_count).where(*where)).one()
    notes = session.exec(
        select(Outcome.note)
        .where(*where, col(Outcome.worked).is_(False), Outcome.note != "")
        .order_by(col(Outcome.created_at).desc())
        .limit(NOTES_SHOWN)
    ).all()
    return OutcomeStats(worked=int(worked), reports=int(reports), failed_notes=list(notes))
