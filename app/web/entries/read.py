"""An entry as people and programs read it: its page, its JSON, its snippets, and the list of
entries."""

from urllib.parse import urlencode

from fastapi import HTTPException, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, PlainTextResponse
from pydantic import Field
from sqlmodel import Session

from app import storage
from app.catalog import (
    DEFAULT_PER_PAGE,
    MAX_PER_PAGE,
    EntryListing,
    EntrySort,
    NotFound,
    get_entry_listing,
)
from app.entry_details import EntryDetails, fix_first, get_entry_details, table_of_contents
from app.web import routers
from app.web.deps import MAX_STORED_INT, SessionDep
from app.web.http import errors, render, site_path
from app.wiki import merged_with

api_router = routers.api_router()

page_router = routers.page_router()


@api_router.get(
    "/entries/{entry_id}",
    summary="One entry with its rendered HTML and Markdown source",
    description="The `ETag` header carries the entry's revision. An archived entry (after "
    "`DELETE`) is 404 here; its history stays at `…/revisions`, and restoring a revision brings "
    "it back.",
    responses=errors(404, 422),
)
def entry(
    session: SessionDep,
    response: Response,
    entry_id: str = Path(description="The entry's id", examples=["view-non-contiguous"]),
) -> EntryDetails:
    details = entry_details_out(session, response, entry_id)
    if details.archived:
        raise NotFound(
            f"entry {entry_id!r} is archived; its revisions are at "
            f"/api/v1/entries/{entry_id}/revisions, and restoring one brings it back"
        )
    return details


def entry_details_out(session: Session, response: Response, entry_id: str) -> EntryDetails:
    details = get_entry_details(session, entry_id)
    if details is None:
        raise NotFound(f"no entry with id {entry_id!r}")
    response.headers["ETag"] = f'"{details.revision}"'
    return details


class EntryListingOut(EntryListing):
    next: str | None = Field(description="The next page's address, null on the last page.")
    prev: str | None = Field(description="The previous page's address, null on the first.")


@api_router.get(
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
        query: dict[str, str | int] = {"page": number, "per_page": per_page, "sort": sort}
        if kind:
            query["kind"] = kind
        return site_path(request, f"/api/v1/entries?{urlencode(query)}")

    return EntryListingOut(
        **listing.model_dump(), next=link(listing.next_page), prev=link(listing.prev_page)
    )


@page_router.get("/entries/{entry_id}/snippets/{position}.py")
def snippet_download(entry_id: str, position: int, session: SessionDep) -> PlainTextResponse:
    snippets = [
        s for s in storage.entry_snippets(session, entry_id=entry_id) if s.position == position
    ]
    if not snippets:
        raise HTTPException(404, f"Entry {entry_id!r} has no snippet {position}.")
    (snippet,) = snippets
    filename = f"{entry_id}-{snippet.role}-{position}.py"
    return PlainTextResponse(
        snippet.code,
        media_type="text/x-python; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@page_router.get("/entries", response_class=HTMLResponse)
def entries_page(
    request: Request,
    session: SessionDep,
    page: int = Query(1, ge=1, le=10_000),
    per_page: int = Query(DEFAULT_PER_PAGE, ge=1, le=MAX_PER_PAGE),
    sort: EntrySort = "title",
    kind: str | None = Query(None, max_length=20),
):
    listing = get_entry_listing(session, page=page, per_page=per_page, sort=sort, kind=kind)
    return render(request, "entries.html", {"listing": listing})


UNCHANGED = "unchanged"  # `?saved=unchanged`: a save of the text the entry already had


def saved_notice(saved: str | None, revision: int) -> str | None:
    """What the page says after the editor's save redirected to it (`?saved=<revision>`);
    nothing for a revision the entry does not have."""
    if saved == UNCHANGED:
        return f"Nothing to save: the text is already revision {revision}."
    if saved is not None and saved.isdigit() and 1 <= int(saved) <= revision:
        return f"Saved as revision {int(saved)}."
    return None


@page_router.get("/entries/{entry_id}", response_class=HTMLResponse)
def entry_page(
    request: Request,
    entry_id: str,
    session: SessionDep,
    merged: int | None = Query(None, ge=2, le=MAX_STORED_INT, include_in_schema=False),
    merged_from: int | None = Query(
        None, alias="from", ge=1, le=MAX_STORED_INT, include_in_schema=False
    ),
    saved: str | None = Query(None, max_length=20, description="The revision a save made."),
):
    """The entry; `?saved=N` says a save made revision N, and `?merged=N&from=B` (where the
    editor sends a save it merged) says what it was merged with."""
    details = get_entry_details(session, entry_id)
    if details is None:
        raise HTTPException(404, f"There is no entry {entry_id!r}. Try searching for it.")
    first, rest = fix_first(details.html)
    toc = table_of_contents(first + rest)
    merge = None
    if merged is not None and merged_from is not None and merged_from < merged <= details.revision:
        merge = merged_with(session, entry_id, merged_from, merged)
    context = {
        "entry": details,
        "first": first,
        "rest": rest,
        "toc": toc,
        "merge": merge,
        "saved": None if merge else saved_notice(saved, details.revision),
    }
    return render(request, "entry.html", context, f"/api/v1/entries/{entry_id}")
