"""The tags page and the page of every entry; their twins are /api/v1/tags and /api/v1/entries."""

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from app.catalog import DEFAULT_PER_PAGE, MAX_PER_PAGE, EntrySort, get_entry_listing, get_tags
from app.web.auth import read_access
from app.web.deps import SearchDep, SessionDep
from app.web.pages import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(read_access)])


@router.get("/tags", response_class=HTMLResponse)
def tags_page(request: Request, service: SearchDep):
    return render(request, "tags.html", {"listing": get_tags(service)})


@router.get("/entries", response_class=HTMLResponse)
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
