"""The wiki's history: every revision of an entry, the diff between two, and the recent
changes of the whole wiki. Reads only; saving is `app.wiki`."""

import difflib

from pydantic import BaseModel, Field
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer
from sqlmodel import Session, col, select

from app import storage
from app.catalog import NotFound
from app.entry_details import entry_url
from app.models import Change, Entry, Revision, UtcTimestamp

_DIFF_FORMATTER = HtmlFormatter(nowrap=True)


class RevisionOut(BaseModel):
    number: int
    author: str
    source: str
    message: str
    created_at: UtcTimestamp
    content_hash: str

    @classmethod
    def of(cls, row: Revision) -> "RevisionOut":
        return cls(
            number=row.number,
            author=row.author,
            source=row.source,
            message=row.message,
            created_at=row.created_at,
            content_hash=row.content_hash,
        )


class RevisionDetail(RevisionOut):
    markdown: str


def revision_history(session: Session, entry_id: str) -> list[RevisionOut]:
    """Newest first; NotFound for an unknown entry."""
    if storage.get_entry(session, entry_id) is None:
        raise NotFound(f"There is no entry {entry_id!r}.")
    rows = storage.list_revisions(session, entry_id=entry_id)
    return [RevisionOut.of(r) for r in reversed(rows)]


def revision_detail(session: Session, entry_id: str, number: int) -> RevisionDetail:
    row = storage.get_revision(session, entry_id=entry_id, number=number)
    if row is None:
        raise NotFound(f"Entry {entry_id!r} has no revision {number}.")
    return RevisionDetail(**RevisionOut.of(row).model_dump(), markdown=row.markdown)


def unified_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    """A unified diff as text; empty when the texts are the same."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=old_label,
        tofile=new_label,
        n=3,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def diff_html(old: str, new: str, old_label: str, new_label: str) -> str:
    """A unified diff, highlighted; empty when the texts are the same."""
    text = unified_diff(old, new, old_label, new_label)
    return highlight(text, DiffLexer(), _DIFF_FORMATTER) if text else ""


class RevisionDiff(BaseModel):
    entry_id: str
    before: RevisionOut
    after: RevisionOut
    unified: str = Field(description="The unified diff of the Markdown; empty when the same.")


def revision_diff(session: Session, entry_id: str, old: int, new: int) -> RevisionDiff:
    """What the diff page shows between two revisions; NotFound for a missing one."""
    before = revision_detail(session, entry_id, old)
    after = revision_detail(session, entry_id, new)
    return RevisionDiff(
        entry_id=entry_id,
        before=RevisionOut(**before.model_dump(exclude={"markdown"})),
        after=RevisionOut(**after.model_dump(exclude={"markdown"})),
        unified=unified_diff(before.markdown, after.markdown, f"revision {old}", f"revision {new}"),
    )


class ChangeOut(BaseModel):
    seq: int
    entry_id: str
    title: str | None
    action: str
    revision: int | None
    actor: str
    message: str
    created_at: UtcTimestamp
    url: str


def recent_changes(
    session: Session, *, limit: int = 50, before: int | None = None
) -> list[ChangeOut]:
    """The wiki's writes, newest first, each with who, what and why."""
    query = (
        select(Change, Revision.message, Entry.title)
        .outerjoin(
            Revision,
            (col(Revision.entry_id) == col(Change.entry_id))
            & (col(Revision.number) == col(Change.revision)),
        )
        .outerjoin(Entry, col(Entry.id) == col(Change.entry_id))
        .order_by(col(Change.seq).desc())
        .limit(limit)
    )
    if before is not None:
        query = query.where(col(Change.seq) < before)
    return [
        ChangeOut(
            seq=change.seq or 0,
            entry_id=change.entry_id,
            title=title,
            action=change.action,
            revision=change.revision,
            actor=change.actor,
            message=message or "",
            created_at=change.created_at,
            url=entry_url(change.entry_id),
        )
        for change, message, title in session.exec(query).all()
    ]
