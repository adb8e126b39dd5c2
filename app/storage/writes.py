"""Every write of an entry: a save (new entry or revision), an archive and a delete, each with
its change row and the webhook deliveries it causes; and the shared secrets and the verify
results."""

from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete

from app.models import AppSecret, Entry, Revision, Signature, Snippet, Verification, utcnow
from app.storage.feed import _record_change
from app.storage.reads import get_revision
from app.webhooks.queue import enqueue_entry_event

if TYPE_CHECKING:
    from app.entries import EntryDocument


# ---- writing (the caller commits: one transaction per logical change) ------------------------


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
    # Queued in this transaction: the webhooks hear of the change exactly when it commits.
    enqueue_entry_event(session, action=action, entry_id=entry.id, title=entry.title, actor=author)
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
    enqueue_entry_event(
        session, action="archive", entry_id=entry.id, title=entry.title, actor=actor
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
