"""What the home, tag, tags and all-entries pages show (and their JSON twins): counts from the
search index, lists from the database."""

from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, Field
from sqlmodel import Session

from app import storage
from app.entry_details import entry_url
from app.errors import PitfallsError
from app.models import UtcTimestamp
from app.search import SearchService

RECENT_COUNT = 8
TAG_PAGE_LIMIT = 200
MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 50
# How the all-entries list may be ordered; a leading "-" reverses (newest change first).
EntrySort = Literal["title", "-title", "updated", "-updated"]
ENTRY_SORTS: tuple[str, ...] = ("title", "-title", "updated", "-updated")


class NotFound(PitfallsError, LookupError):
    """What was asked for does not exist; the message says so in words a person can act on."""

    status = 404


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


class TagCount(BaseModel):
    tag: str
    count: int
    url: str


class TagList(BaseModel):
    total: int = Field(description="How many tags there are.")
    tags: list[TagCount] = Field(description="Every tag with its number of entries, A to Z.")


def tag_url(tag: str) -> str:
    return f"/tags/{quote(tag, safe='')}"


def get_tags(search: SearchService) -> TagList:
    counts = search.search("", limit=1, highlights=False).facets.get("tag", {})
    tags = [TagCount(tag=t, count=n, url=tag_url(t)) for t, n in sorted(counts.items())]
    return TagList(total=len(tags), tags=tags)


class EntryListing(BaseModel):
    total: int = Field(description="Active entries (of `kind`, when given).")
    page: int
    per_page: int
    pages: int = Field(description="How many pages of `per_page` there are (at least 1).")
    sort: str
    kind: str | None
    kinds: dict[str, int] = Field(description="Active entries of each kind, for filtering.")
    entries: list[RecentEntry]
    next_page: int | None
    prev_page: int | None


def get_entry_listing(
    session: Session,
    *,
    page: int = 1,
    per_page: int = DEFAULT_PER_PAGE,
    sort: str = "title",
    kind: str | None = None,
) -> EntryListing:
    """One page of every active entry, by title or by last change; a page past the end is empty."""
    if sort not in ENTRY_SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    per_page = max(1, min(per_page, MAX_PER_PAGE))
    rows, total = storage.entry_listing(
        session,
        kind=kind or None,
        order_by=sort.lstrip("-"),
        descending=sort.startswith("-"),
        offset=(page - 1) * per_page,
        limit=per_page,
    )
    pages = max(1, -(-total // per_page))
    return EntryListing(
        total=total,
        page=page,
        per_page=per_page,
        pages=pages,
        sort=sort,
        kind=kind or None,
        kinds=storage.count_by_kind(session),
        entries=[RecentEntry(**_card_fields(e), updated_at=e.updated_at) for e in rows],
        next_page=page + 1 if page < pages else None,
        prev_page=min(page - 1, pages) if page > 1 else None,
    )
