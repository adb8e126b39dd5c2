"""Did the fix work? Reports per (error fingerprint, entry), and the rates they make.

A report counts only for an error the server itself answered with that entry: it carries the
answer's signed token (`app.answer_tokens`), so nobody invents fingerprints to vote with. One
report per voter (a user, a token, or an anonymous address) for each (fingerprint, entry): a
second report from the same voter replaces the first, so nobody stuffs the count. Every voter
is throttled per hour (an anonymous address more tightly). The entry page and every answer show
the measured rate ("fixed it for 14 of 16") and the notes of what did not work; signatures stay
deterministic.
"""

import re
from dataclasses import dataclass
from datetime import timedelta

from pydantic import BaseModel
from sqlalchemy import Engine, case, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from app.answer_shapes import OutcomeStats
from app.answer_tokens import AnswerSigner, AnswerTokenRefused
from app.errors import PitfallsError
from app.models import Entry, Outcome, utcnow

FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")
MAX_NOTE = 500  # kept of a note
MAX_NOTE_SENT = 2000  # taken in a report (longer is refused, not cut)
ANONYMOUS_PER_HOUR = 20  # reports one address may make in an hour without a login or token
PER_HOUR = 60  # reports one login or token may make in an hour
NOTES_SHOWN = 5


@dataclass(frozen=True)
class ReportRules:
    """What a report must carry and how many a voter may make: the app's settings and secret."""

    signer: AnswerSigner
    per_hour: int = PER_HOUR
    anonymous_per_hour: int = ANONYMOUS_PER_HOUR

    @classmethod
    def of(cls, settings, secret: str) -> "ReportRules":
        return cls(
            signer=AnswerSigner(secret, max_age_s=settings.answer_token_days * 86400),
            per_hour=settings.reports_per_hour,
            anonymous_per_hour=settings.anonymous_reports_per_hour,
        )


class OutcomeRefused(PitfallsError):
    """A report that is not counted: `status` says why (422 malformed, 403 not vouched for,
    404 no such entry, 429 too many)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message, status=status)


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
    answer_token: str,
    rules: ReportRules,
) -> OutcomeOut:
    """Store `voter`'s report on entry `id` for error `fingerprint`; OutcomeRefused (with the
    status to answer) when the token does not vouch for it, the entry is gone, or the voter has
    made its hour's reports."""
    if not FINGERPRINT.match(fingerprint or ""):
        raise OutcomeRefused("fingerprint must be the 16 hex digits an answer gave")
    if len(note) > MAX_NOTE_SENT:
        raise OutcomeRefused(
            f"the note is longer than {MAX_NOTE_SENT} characters; say what was tried in a "
            "sentence or two"
        )
    note = _clean(note)
    now = utcnow()
    with Session(engine) as session:
        entry = session.get(Entry, id)
        if entry is None or entry.archived:
            raise OutcomeRefused(f"there is no entry {id!r}", status=404)
        try:
            rules.signer.check(answer_token or "", fingerprint=fingerprint, entry_id=id)
        except AnswerTokenRefused as exc:
            raise OutcomeRefused(str(exc), status=403 if answer_token else 422) from None
        existing = _find(session, fingerprint, id, voter)
        if existing is None:  # replacing one's own report adds nothing to count
            _check_allowance(session, voter=voter, rules=rules, now=now)
        replaced = existing is not None
        row = existing or Outcome(
            fingerprint=fingerprint, entry_id=id, voter=voter[:200], worked=worked
        )
        row.worked, row.note, row.created_at = worked, note, now
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # the same voter's report committed a moment ago: replace it
            session.rollback()
            committed = _find(session, fingerprint, id, voter)
            assert committed is not None
            committed.worked, committed.note, committed.created_at = worked, note, now
            session.add(committed)
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


def _check_allowance(session: Session, *, voter: str, rules: ReportRules, now) -> None:
    anonymous = voter.startswith("addr:")
    allowed = rules.anonymous_per_hour if anonymous else rules.per_hour
    recent = session.exec(
        select(func.count())
        .select_from(Outcome)
        .where(Outcome.voter == voter[:200], col(Outcome.created_at) > now - timedelta(hours=1))
    ).one()
    if recent >= allowed:
        who = "one address without a login or token" if anonymous else "one login or token"
        raise OutcomeRefused(
            f"at most {allowed} reports an hour from {who}; try again later", status=429
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
