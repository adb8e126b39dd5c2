"""Everything a reader sees of one entry, as one value: the entry page, its JSON twin and the
CLI all show this.
"""

from datetime import datetime

from pydantic import BaseModel
from sqlmodel import Session

from app import storage


class SignatureOut(BaseModel):
    exception: str | None
    message: str
    frame: str | None
    example: str


class SnippetOut(BaseModel):
    role: str
    options: dict[str, str]
    code: str
    line: int


class EntryDetails(BaseModel):
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    aliases: list[str]
    versions: str | None
    related: list[str]
    sources: list[str]
    html: str
    markdown: str
    revision: int
    revisions: int
    archived: bool
    created_at: datetime
    updated_at: datetime
    url: str
    signatures: list[SignatureOut]
    snippets: list[SnippetOut]


def entry_url(entry_id: str) -> str:
    return f"/entries/{entry_id}"


def get_entry_details(session: Session, entry_id: str) -> EntryDetails | None:
    entry = storage.get_entry(session, entry_id)
    if entry is None:
        return None
    return EntryDetails(
        id=entry.id,
        title=entry.title,
        summary=entry.summary,
        kind=entry.kind,
        tags=entry.tags,
        aliases=entry.aliases,
        versions=entry.versions,
        related=entry.related,
        sources=entry.sources,
        html=entry.body_html,
        markdown=storage.current_markdown(session, entry=entry),
        revision=entry.revision,
        revisions=storage.count_revisions(session, entry_id=entry.id),
        archived=entry.archived,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        url=entry_url(entry.id),
        signatures=[
            SignatureOut(exception=s.exception, message=s.message, frame=s.frame, example=s.example)
            for s in storage.entry_signatures(session, entry_id=entry.id)
        ],
        snippets=[
            SnippetOut(role=s.role, options=s.options, code=s.code, line=s.line)
            for s in storage.entry_snippets(session, entry_id=entry.id)
        ],
    )
