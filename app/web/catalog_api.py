"""Listing the catalogue as JSON: every entry (paged, sorted), every tag, and the help page.

The twins of /entries, /tags and /help; the pages call the same functions.
"""

from html.parser import HTMLParser
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from app.catalog import (
    DEFAULT_PER_PAGE,
    MAX_PER_PAGE,
    EntryListing,
    EntrySort,
    TagList,
    get_entry_listing,
    get_tags,
)
from app.web.api import errors
from app.web.auth import read_access
from app.web.deps import SearchDep, SessionDep
from app.web.paths import site_path
from app.web.twins import app_routes

router = APIRouter(
    prefix="/api/v1", tags=["api"], dependencies=[Depends(read_access)], responses=errors(401)
)


class EntryListingOut(EntryListing):
    next: str | None = Field(description="The next page's address, null on the last page.")
    prev: str | None = Field(description="The previous page's address, null on the first.")


@router.get(
    "/entries",
    summary="Every active entry, a page at a time, by title or by last change",
    description="`sort`: `title` (A to Z), `-title`, `-updated` (newest change first) or "
    "`updated`. A page past the end is empty; `next` and `prev` link the neighbours.",
    responses=errors(422),
)
def entries(
    request: Request,
    session: SessionDep,
    page: int = Query(1, ge=1, le=10_000),
    per_page: int = Query(DEFAULT_PER_PAGE, ge=1, le=MAX_PER_PAGE),
    sort: EntrySort = "title",
    kind: str | None = Query(None, max_length=20, description="Only entries of this kind"),
) -> EntryListingOut:
    listing = get_entry_listing(session, page=page, per_page=per_page, sort=sort, kind=kind)

    def link(number: int | None) -> str | None:
        if number is None:
            return None
        query = {"page": number, "per_page": per_page, "sort": sort}
        if kind:
            query["kind"] = kind
        return site_path(request, f"/api/v1/entries?{urlencode(query)}")

    return EntryListingOut(
        **listing.model_dump(), next=link(listing.next_page), prev=link(listing.prev_page)
    )


@router.get("/tags", summary="Every tag with its number of entries", responses=errors(503))
def tags(service: SearchDep) -> TagList:
    return get_tags(service)


# ---- help ----------------------------------------------------------------------------------


class HelpSection(BaseModel):
    id: str
    heading: str
    text: str = Field(description="The section's prose, as plain text.")
    code: list[str] = Field(description="Its code blocks and commands, verbatim.")


class Endpoint(BaseModel):
    method: str
    path: str
    summary: str


class HelpOut(BaseModel):
    sections: list[HelpSection]
    endpoints: list[Endpoint] = Field(description="Every route of the JSON API.")
    docs: str = Field(description="The API's interactive description.")
    openapi: str = Field(description="The API's OpenAPI document.")


class _HelpReader(HTMLParser):
    """The help page's sections: each <h2 id> starts one; prose and <pre> blocks fill it."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[dict] = []
        self._in: str | None = None  # "heading" or "pre"
        self._buffer: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "h2":
            self.sections.append(
                {"id": dict(attrs).get("id") or "", "heading": "", "text": [], "code": []}
            )
            self._in, self._buffer = "heading", []
        elif tag == "pre" and self.sections:
            self._in, self._buffer = "pre", []

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2" and self._in == "heading":
            self.sections[-1]["heading"] = "".join(self._buffer).strip()
            self._in = None
        elif tag == "pre" and self._in == "pre":
            self.sections[-1]["code"].append("".join(self._buffer).strip("\n"))
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self._buffer.append(data)
        elif self.sections:
            self.sections[-1]["text"].append(data)


def help_sections(html: str) -> list[HelpSection]:
    reader = _HelpReader()
    reader.feed(html)
    reader.close()
    return [
        HelpSection(
            id=s["id"],
            heading=s["heading"],
            text=" ".join("".join(s["text"]).split()),
            code=s["code"],
        )
        for s in reader.sections
    ]


def api_endpoints(app) -> list[Endpoint]:
    found = []
    for route in app_routes(app):
        path = getattr(route, "path", "")
        if not path.startswith("/api/") or not getattr(route, "include_in_schema", False):
            continue
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                found.append(Endpoint(method=method, path=path, summary=route.summary or ""))
    return found


@router.get("/help", summary="The help page: its sections, and every route of the API")
def help_content(request: Request) -> HelpOut:
    # Only the page's own block is rendered: one text for the page and its twin.
    template = request.app.state.templates.get_template("help.html")
    context = template.new_context({"request": request, "root": site_path(request, "")})
    html = "".join(template.blocks["content"](context))
    return HelpOut(
        sections=help_sections(html),
        endpoints=api_endpoints(request.app),
        docs=site_path(request, "/docs"),
        openapi=site_path(request, "/openapi.json"),
    )
