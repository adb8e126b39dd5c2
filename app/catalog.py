"""What the home and tag pages show, from the search index (counts) and the database (recent)."""

from pydantic import BaseModel
from sqlmodel import Session

from app import storage
from app.entry_details import entry_url
from app.models import UtcTimestamp
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
    updated_at: UtcTimestamp


class Overview(BaseModel):
    entries: int
    kinds: dict[str, int]
    tags: dict[str, int]
    recent: list[RecentEntry]


class TagPage(BaseModel):
    tag: str
    total: int
    entries: list[EntryCard]


def _card_fields(item) -> dict:
    """The card fields of an entry row or a search hit: both have these attributes."""
    return {
        "id": item.id,
        "title": item.title,
        "summary": item.summary,
        "kind": item.kind,
        "tags": item.tags,
        "url": entry_url(item.id),
    }


def get_overview(session: Session, search: SearchService) -> Overview:
    everything = search.search("", limit=1, highlights=False)
    return Overview(
        entries=everything.total,
        kinds=everything.facets.get("kind", {}),
        tags=everything.facets.get("tag", {}),
        recent=[
            RecentEntry(**_card_fields(e), updated_at=e.updated_at)
            for e in storage.recent_entries(session, limit=RECENT_COUNT)
        ],
    )


def get_tag_page(search: SearchService, tag: str) -> TagPage:
    result = search.search("", tag=tag, limit=TAG_PAGE_LIMIT, highlights=False, facets=False)
    if not result.total:
        raise NotFound(f"No entry has the tag {tag!r}.")
    cards = sorted(
        (EntryCard(**_card_fields(h)) for h in result.hits), key=lambda c: c.title.lower()
    )
    return TagPage(tag=tag, total=result.total, entries=cards)
