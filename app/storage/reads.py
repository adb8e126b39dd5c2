"""Every read of entries and their parts: signatures, snippets, revisions, verify results, and
what the matcher and the likely tier read of the active entries."""

import hashlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from sqlalchemy import ColumnElement, func
from sqlmodel import Session, col, select

from app.matching import SignatureRecord
from app.matching.likely import EntryText
from app.models import Change, Entry, Revision, Signature, Snippet, Verification
from app.rendering import markdown_section


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


def active_ids_among(session: Session, entry_ids: Iterable[str]) -> set[str]:
    """Which of these ids name an active entry (one query by the key, whatever the base's size)."""
    ids = sorted(set(entry_ids))
    if not ids:
        return set()
    query = select(Entry.id).where(col(Entry.archived).is_(False), col(Entry.id).in_(ids))
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


def _record(s: Signature) -> SignatureRecord:
    return SignatureRecord(
        entry_id=s.entry_id,
        position=s.position,
        message=s.message,
        example=s.example,
        exception=s.exception,
        frame=s.frame,
        context=s.context,
    )


def active_signature_records(session: Session) -> list[SignatureRecord]:
    """What the matcher needs of every active signature."""
    return [_record(s) for s in active_signatures(session)]


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


def signature_records_of(session: Session, entry_ids: Iterable[str]) -> list[SignatureRecord]:
    """`active_signature_records` of these entries only (none for an archived or gone one)."""
    ids = sorted(set(entry_ids))
    if not ids:
        return []
    query = (
        select(Signature)
        .join(Entry, col(Entry.id) == col(Signature.entry_id))
        .where(col(Entry.archived).is_(False), col(Signature.entry_id).in_(ids))
        .order_by(col(Signature.entry_id), col(Signature.position))
    )
    return [_record(s) for s in session.exec(query)]


def entry_texts_of(
    session: Session, entry_ids: Iterable[str], records: Sequence[SignatureRecord]
) -> list[EntryText]:
    """`active_entry_texts` of these entries only; `records`: their signatures
    (`signature_records_of`)."""
    ids = sorted(set(entry_ids))
    if not ids:
        return []
    signatures: dict[str, list[SignatureRecord]] = {}
    for r in records:
        signatures.setdefault(r.entry_id, []).append(r)
    query = (
        select(Entry)
        .where(col(Entry.archived).is_(False), col(Entry.id).in_(ids))
        .order_by(col(Entry.id))
    )
    return [
        EntryText.of(e, markdown_section(e.body_markdown, "What you see"), signatures.get(e.id, ()))
        for e in session.exec(query)
    ]


def changed_entry_ids(session: Session, *, after_seq: int, upto_seq: int) -> tuple[list[str], int]:
    """The entries named by the feed's changes numbered after `after_seq` up to `upto_seq`,
    and how many changes those were."""
    query = select(Change.entry_id).where(col(Change.seq) > after_seq, col(Change.seq) <= upto_seq)
    rows = session.exec(query).all()
    return sorted(set(rows)), len(rows)


def list_revisions(session: Session, *, entry_id: str) -> Sequence[Revision]:
    query = select(Revision).where(Revision.entry_id == entry_id).order_by(col(Revision.number))
    return session.exec(query).all()


def get_revision(session: Session, *, entry_id: str, number: int) -> Revision | None:
    query = select(Revision).where(Revision.entry_id == entry_id, Revision.number == number)
    return session.exec(query).first()


def revision_authors(session: Session, *, entry_id: str, after: int, upto: int) -> list[str]:
    """Who wrote the revisions numbered after `after` up to `upto`, oldest first."""
    query = (
        select(Revision.author)
        .where(Revision.entry_id == entry_id, Revision.number > after, Revision.number <= upto)
        .order_by(col(Revision.number))
    )
    return list(session.exec(query).all())


def count_revisions(session: Session, *, entry_id: str) -> int:
    query = select(func.count()).select_from(Revision).where(Revision.entry_id == entry_id)
    return session.exec(query).one()


def current_markdown(session: Session, *, entry: Entry) -> str:
    query = select(Revision.markdown).where(
        Revision.entry_id == entry.id, Revision.number == entry.revision
    )
    return session.exec(query).one()
