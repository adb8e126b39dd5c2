"""Editing entries in the wiki: checking a draft, saving it as a revision, archiving, restoring,
history, diffs and recent changes. Pages and the JSON API both call these functions.

A draft is judged by the same checks as `pitfalls check`, with the database standing in for the
sibling files: the contract, `related` links, and collisions with every other entry's signatures.
Saving on top of a revision that is no longer the latest merges the edit with what was saved
since (a three-way merge, `app.merges`); only edits to the same or adjacent lines are refused
(`EditConflict`). The merged text passes the same checks as any draft before it is saved, and its
revision says what it was merged with. The unique (entry, number) constraint on revisions settles
two saves that race past the check.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app import storage
from app.accounts import Principal
from app.catalog import NotFound
from app.checker import (
    ExampleMatcher,
    collision_problems,
    related_problems,
    rival_problems,
    signature_records,
)
from app.entries import EntryDocument, Problem, parse_entry
from app.errors import PitfallsError
from app.matching import (
    KNOWN_MATCH_THRESHOLD,
    SignatureHit,
    SignatureMatcher,
    SignatureRecord,
    match_paste,
)
from app.merges import Conflict, three_way_merge
from app.models import Entry
from app.signatures import PatternError, compile_pattern
from app.tracebacks import parse_traceback

MAX_MESSAGE_LENGTH = 500
RESERVED_IDS = frozenset({"new", "check"})  # page paths under /entries/


class SaveRefused(PitfallsError):
    """The draft cannot be saved as it is; `problems` says where, `status` how to answer."""

    def __init__(self, message: str, problems: Sequence[Problem] = (), status: int = 422) -> None:
        super().__init__(message, status=status)
        self.problems = list(problems)

    def extra(self) -> dict:
        problems = [
            {"line": p.line, "message": p.message, "severity": p.severity} for p in self.problems
        ]
        return {"problems": problems}


class EditConflict(PitfallsError):
    """Someone saved the entry after the revision this edit started from. The API's edits are
    conditional requests (If-Match), hence 412 and the current ETag; a page's form says 409."""

    status = 412
    page_status = 409

    def __init__(
        self,
        entry_id: str,
        base: int,
        current: int,
        overlaps: Sequence[Conflict] = (),
        too_repetitive: bool = False,
    ) -> None:
        where = ""
        if too_repetitive:
            where = " The texts repeat the same lines too often to merge your edit safely."
        elif overlaps:
            lines = ", ".join(_line_range(c.ours_lines) for c in overlaps[:5])
            where = (
                f" Your edit and what was saved since touch the same or neighbouring lines "
                f"({lines} of your text), so they cannot be merged."
            )
        super().__init__(
            f"Entry {entry_id!r} changed while you were editing: you started from revision "
            f"{base}, the latest is revision {current}.{where} Nothing was saved."
        )
        self.entry_id = entry_id
        self.base = base
        self.current = current

    def headers(self) -> dict[str, str]:
        return {"ETag": f'"{self.current}"'}

    def extra(self) -> dict:
        return {"current_revision": self.current}


def _line_range(lines: tuple[int, int]) -> str:
    start, end = lines
    if end < start:
        return f"after line {end}" if end else "the start"
    return f"line {start}" if start == end else f"lines {start}-{end}"


class MergedWith(BaseModel):
    """A save that started from an older revision and was merged with the ones since."""

    base_revision: int = Field(description="The revision the edit started from.")
    revision: int = Field(description="The latest revision it was merged with.")
    authors: list[str] = Field(description="Who wrote the revisions it was merged with.")
    message: str = Field(description="What to tell the person who saved.")


def merged_with(session: Session, entry_id: str, base: int, latest: int) -> MergedWith:
    """Who saved after `base` up to `latest`, as a sentence for the person whose edit merged."""
    authors = list(
        dict.fromkeys(storage.revision_authors(session, entry_id=entry_id, after=base, upto=latest))
    )
    message = f"Merged with {_changes_by(authors, base, latest)}."
    return MergedWith(base_revision=base, revision=latest, authors=authors, message=message)


def _changes_by(authors: list[str], base: int, latest: int) -> str:
    if not authors:
        names = "someone"
    elif len(authors) == 1:
        names = authors[0]
    else:
        names = ", ".join(authors[:-1]) + " and " + authors[-1]
    if latest == base + 1:
        return f"the change by {names} in revision {latest}"
    return f"the changes by {names} in revisions {base + 1}-{latest}"


class MergeRefused(SaveRefused):
    """The edit merged with the newer revision, but the merged text does not pass the checks;
    `markdown` is that text, which the problems' lines refer to."""

    def __init__(self, merge: MergedWith, markdown: str, problems: Sequence[Problem]) -> None:
        errors = [p for p in problems if p.severity == "error"]
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        changes = _changes_by(merge.authors, merge.base_revision, merge.revision)
        super().__init__(
            f"Your edit merges with {changes}, but the merged entry does not pass the checks: "
            f"line {first.line}: {first.message}{more}. Nothing was saved.",
            problems,
        )
        self.merge = merge
        self.markdown = markdown

    def extra(self) -> dict:
        return {
            **super().extra(),
            "merged_with": self.merge.revision,
            "merged_markdown": self.markdown,
        }


@dataclass(frozen=True)
class Saved:
    entry: Entry
    action: str  # create, update or restore; "unchanged" when the text was already so
    merged: MergedWith | None = None  # set when the edit was merged with newer revisions


@dataclass
class DraftCheck:
    doc: EntryDocument
    problems: list[Problem]
    id_taken: bool = False  # a new entry whose id another entry has

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


def _other_records(session: Session, entry_id: str | None) -> list[SignatureRecord]:
    return [r for r in storage.active_signature_records(session) if r.entry_id != entry_id]


class _WithDraft:
    """A shared matcher of every active entry, with one entry's stored signatures replaced by
    its draft's: what collisions are judged against, without recompiling every pattern."""

    def __init__(self, shared: SignatureMatcher, entry_id: str, own: SignatureMatcher) -> None:
        self.shared, self.entry_id, self.own = shared, entry_id, own

    def match_exception_line(self, text: str) -> list[SignatureHit]:
        others = self.shared.match_exception_line(text)
        return [h for h in others if h.signature.entry_id != self.entry_id] + (
            self.own.match_exception_line(text)
        )


def check_draft(
    session: Session,
    markdown: str,
    *,
    editing: str | None = None,
    shared: SignatureMatcher | None = None,
) -> DraftCheck:
    """Every problem of a draft, with its line: the contract, links, collisions, a taken id.

    `shared`, a matcher of the active entries (the process's cached one), makes the check cheap
    enough to run as a person types; without it the other entries' signatures are read afresh.
    """
    doc = parse_entry(markdown, f"{editing or 'new-entry'}.md", expected_id=editing)
    problems = list(doc.problems)
    front = doc.front
    id_taken = False
    if front is not None:
        if front.id in RESERVED_IDS:
            problems.append(
                Problem(doc.path, doc.line_of("id"), f"the id {front.id!r} is reserved")
            )
        id_taken = editing is None and storage.get_entry(session, front.id) is not None
        if id_taken:
            problems.append(
                Problem(
                    doc.path,
                    doc.line_of("id"),
                    f"an entry with id {front.id!r} already exists: edit that one, or choose "
                    "another id",
                )
            )
        known = storage.active_ids_among(session, front.related) | {front.id}
        problems += related_problems([doc], known)
        if doc.ok:
            own = signature_records([doc])
            matcher: ExampleMatcher
            messages = None
            if shared is not None:
                # Only the draft's own signatures and the examples they reach are looked at.
                kept = [
                    (r, m)
                    for r, m in zip(shared.records, shared.example_messages(), strict=True)
                    if r.entry_id != front.id
                ]
                others = [r for r, _ in kept]
                messages = [m for _, m in kept]
                matcher = _WithDraft(shared, front.id, SignatureMatcher(own))
            else:
                others = _other_records(session, front.id)
                matcher = SignatureMatcher(others + own)
            problems += collision_problems([doc], matcher)
            # A draft that wins another entry's example would make that entry uneditable.
            problems += rival_problems([doc], others, matcher, messages)
    return DraftCheck(doc=doc, problems=sorted(set(problems)), id_taken=id_taken)


def _clean_message(message: str) -> str:
    # One line of printable text: no database stores a NUL, and no log wants control characters.
    message = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    if not message:
        raise SaveRefused("Write a short message saying what you changed.", status=422)
    if len(message) > MAX_MESSAGE_LENGTH:
        raise SaveRefused(f"The message is longer than {MAX_MESSAGE_LENGTH} characters.")
    return message


def _conflict(session: Session, entry_id: str, base: int) -> NoReturn:
    """Another save took the same revision number (or id) between our check and our write."""
    session.rollback()
    current = storage.get_entry(session, entry_id)
    if current is None:
        raise
    raise EditConflict(entry_id, base, current.revision) from None


def _commit(session: Session, entry_id: str, base: int) -> None:
    try:
        session.commit()
    except IntegrityError:
        _conflict(session, entry_id, base)


def _merge_with_latest(
    session: Session, entry: Entry, base: int, markdown: str
) -> tuple[str, MergedWith]:
    """The edit made from revision `base`, merged with the latest; EditConflict when both
    changed the same lines (or `base` is no revision before the latest)."""
    old = None
    if 1 <= base < entry.revision:
        old = storage.get_revision(session, entry_id=entry.id, number=base)
    if old is None:
        raise EditConflict(entry.id, base, entry.revision)
    latest = storage.current_markdown(session, entry=entry)
    result = three_way_merge(old.markdown, markdown.removeprefix("\ufeff"), latest)
    if result.text is None:
        raise EditConflict(entry.id, base, entry.revision, result.conflicts, result.too_repetitive)
    return result.text, merged_with(session, entry.id, base, entry.revision)


def save_draft(
    session: Session,
    *,
    markdown: str,
    message: str,
    actor: Principal,
    source: str,
    entry_id: str | None = None,
    base_revision: int | None = None,
    shared: SignatureMatcher | None = None,
) -> Saved:
    """Create (no `entry_id`) or update an entry; return it and the change ("unchanged" if the
    text is what it already is). An update from an older `base_revision` is merged with the
    latest. Raises SaveRefused (MergeRefused), EditConflict or NotFound.

    `shared`: the process's matcher of the active entries, brought up to the feed's mark just
    read: the draft is then checked against it (its own signatures, and the examples they
    reach), and the save reads no other entry."""
    message = _clean_message(message)
    entry = None
    merge = None
    if entry_id is not None:
        entry = storage.lock_entry(session, entry_id)
        if entry is None:
            raise NotFound(f"There is no entry {entry_id!r}.")
        if base_revision is not None and base_revision != entry.revision:
            markdown, merge = _merge_with_latest(session, entry, base_revision, markdown)
            message = f"{message} (merged with revision {merge.revision})"
    report = check_draft(session, markdown, editing=entry_id, shared=shared)
    if report.errors and merge is not None:
        raise MergeRefused(merge, report.doc.markdown, report.problems)
    if report.errors:
        count = len(report.errors)
        raise SaveRefused(
            f"The entry has {count} problem{'s' if count > 1 else ''}; nothing was saved.",
            report.problems,
            status=409 if report.id_taken else 422,
        )
    doc = report.doc
    assert doc.front is not None
    if entry is not None and entry.content_hash == doc.content_hash and not entry.archived:
        return Saved(entry, "unchanged", merge)
    base = entry.revision if entry is not None else 0
    try:
        action = storage.save_entry(
            session,
            doc=doc,
            author=actor.label,
            source=source,
            message=message,
            create=entry is None,
        )
    except storage.EntryExists as exc:
        raise SaveRefused(
            f"An entry with id {exc.entry_id!r} already exists (it was created a moment ago); "
            "edit that one, or choose another id. Nothing was saved.",
            status=409,
        ) from None
    except IntegrityError:
        _conflict(session, doc.front.id, base)
    _commit(session, doc.front.id, base)
    saved = storage.get_entry(session, doc.front.id)
    assert saved is not None
    return Saved(saved, action, merge)


def archive(
    session: Session,
    *,
    entry_id: str,
    actor: Principal,
    source: str,
    reason: str | None = None,
) -> Entry:
    """Archive an entry; a `reason` (the web asks for one) becomes the message of a revision
    that records the archive in the history. Archiving an archived entry changes nothing."""
    message = "" if reason is None else "Archived: " + _clean_message(reason)
    entry = storage.lock_entry(session, entry_id)
    if entry is None:
        raise NotFound(f"There is no entry {entry_id!r}.")
    if not entry.archived:
        storage.archive_entry(
            session, entry=entry, actor=actor.label, source=source, message=message
        )
        session.commit()
    return entry


def restore(
    session: Session, *, entry_id: str, number: int, actor: Principal, source: str
) -> Saved:
    """Make an older revision the newest one again (a new revision; the history keeps all)."""
    entry = storage.lock_entry(session, entry_id)
    old = storage.get_revision(session, entry_id=entry_id, number=number)
    if entry is None or old is None:
        raise NotFound(f"Entry {entry_id!r} has no revision {number}.")
    return save_draft(
        session,
        markdown=old.markdown,
        message=f"Restore revision {number}",
        actor=actor,
        source=source,
        entry_id=entry_id,
        base_revision=entry.revision,
    )


# ---- the signature tester --------------------------------------------------------------------


class TesterHit(BaseModel):
    entry_id: str
    draft: bool  # the hit is one of the draft's own signatures
    confidence: float
    known: bool  # above the threshold the paste page uses
    matched_in: str
    signature: int
    pattern: str
    matched_text: str
    subject: str


class TesterResult(BaseModel):
    verdict: str
    draft_wins: bool
    hits: list[TesterHit]
    problems: list[str]  # the draft's signatures that could not be tried, and why


def try_paste(session: Session, doc: EntryDocument, paste: str) -> TesterResult:
    """What the draft's signatures, among all the others, would match in `paste`, and why."""
    if doc.front is None:
        return TesterResult(
            verdict="Fix the front-matter first: the signatures cannot be read.",
            draft_wins=False,
            hits=[],
            problems=[],
        )
    entry_id = doc.front.id
    usable, problems = [], []
    for record in signature_records([doc]):
        try:
            compile_pattern(record.message)
        except PatternError as exc:
            problems.append(f"signatures[{record.position}] is skipped: {exc}")
            continue
        usable.append(record)
    matcher = SignatureMatcher(_other_records(session, entry_id) + usable)
    matches = match_paste(matcher, parse_traceback(paste))[:5]
    hits = [
        TesterHit(
            entry_id=m.entry_id,
            draft=m.entry_id == entry_id,
            confidence=round(m.confidence, 3),
            known=m.confidence >= KNOWN_MATCH_THRESHOLD,
            matched_in=m.matched_in,
            signature=m.hit.signature.position,
            pattern=m.hit.signature.message,
            matched_text=m.matched_text,
            subject=m.subject,
        )
        for m in matches
    ]
    wins = bool(hits) and hits[0].draft and hits[0].known
    if wins:
        verdict = f"This entry would be the answer (confidence {hits[0].confidence:.2f})."
    elif hits and hits[0].known:
        verdict = f"Entry {hits[0].entry_id!r} would be the answer, not this one."
    elif any(h.draft for h in hits):
        verdict = "This entry matches, but below the confidence a known match needs."
    else:
        verdict = "Nothing would match this paste."
    return TesterResult(verdict=verdict, draft_wins=wins, hits=hits, problems=problems)
