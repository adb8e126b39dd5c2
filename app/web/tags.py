"""Tags: every tag, one tag's entries, and the overview of kinds and tags (pages and API)."""

from fastapi import Request
from fastapi.responses import HTMLResponse

from app.catalog import (
    Overview,
    TagList,
    TagPage,
    get_overview,
    get_tag_page,
    get_tags,
)
from app.web import routers
from app.web.deps import SearchDep, SessionDep
from app.web.http import errors, render

api_router = routers.api_router()

page_router = routers.page_router()


@api_router.get(
    "/overview",
    summary="What the home page shows: counts by kind and tag, recent entries",
    responses=errors(503),
)
def overview(session: SessionDep, service: SearchDep) -> Overview:
    return get_overview(session, service)


@api_router.get("/tags", summary="Every tag with its number of entries", responses=errors(503))
def tags(service: SearchDep) -> TagList:
    return get_tags(service)


@api_router.get("/tags/{tag}", summary="The entries with one tag", responses=errors(404, 422, 503))
def tag(tag: str, service: SearchDep) -> TagPage:
    return get_tag_page(service, tag)


@page_router.get("/tags", response_class=HTMLResponse)
def tags_page(request: Request, service: SearchDep):
    return render(request, "tags.html", {"listing": get_tags(service)})


@page_router.get("/tags/{tag}", response_class=HTMLResponse)
def tag_page(request: Request, tag: str, service: SearchDep):
    listing = get_tag_page(service, tag)
    return render(request, "tag.html", {"listing": listing}, f"/api/v1/tags/{tag}")
