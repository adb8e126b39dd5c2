"""What the home and tag pages show, from the search index (counts) and the database (recent)."""

from datetime import datetime

from pydantic import BaseModel
from sqlmodel import Session, col, select

from app.entry_details import entry_url
from app.models import Entry
from app.search import SearchService

RECENT_COUNT = 8
TAG_PAGE_LIMIT = 200


class NotFound(LookupError):
    """What was asked for does not exist; the message says so in words a person can act on."""


class EntryCard(BaseModel):
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    url: str


class RecentEntry(EntryCard):
    updated_at: datetime


class Overview(BaseModel):
    entries: int
    kinds: dict[str, int]
    tags: dict[str, int]
    recent: list[RecentEntry]


class TagPage(BaseModel):
    tag: str
    total: int
    entries: list[EntryCard]


def get_overview(session: Session, search: SearchService) -> Overview:
    everything = search.search("", limit=1, highlights=False)
    rows = session.exec(
        select(Entry)
        .where(col(Entry.archived).is_(False))
        .order_by(col(Entry.updated_at).desc(), col(Entry.id))
        .limit(RECENT_COUNT)
    ).all()
    return Overview(
        entries=everything.total,
        kinds=everything.facets.get("kind", {}),
        tags=everything.facets.get("tag", {}),
        recent=[
            RecentEntry(
                id=e.id,
                title=e.title,
                summary=e.summary,
                kind=e.kind,
                tags=e.tags,
                url=entry_url(e.id),
                updated_at=e.updated_at,
            )
            for e in rows
        ],
    )


def get_tag_page(search: SearchService, tag: str) -> TagPage:
    result = search.search("", tag=tag, limit=TAG_PAGE_LIMIT, highlights=False, facets=False)
    if not result.total:
        raise NotFound(f"No entry has the tag {tag!r}.")
    cards = sorted(
        (
            EntryCard(
                id=h.id,
                title=h.title,
                summary=h.summary,
                kind=h.kind,
                tags=h.tags,
                url=entry_url(h.id),
            )
            for h in result.hits
        ),
        key=lambda card: card.title.lower(),
    )
    return TagPage(tag=tag, total=result.total, entries=cards)
