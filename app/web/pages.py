"""Server-rendered pages; each calls the same function as its JSON twin under /api/v1."""

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from app import storage
from app.entry_details import get_entry_details
from app.web.deps import SearchDep, SessionDep, SettingsDep

router = APIRouter(include_in_schema=False)


def _render(request: Request, template: str, context: dict, alternate: str | None = None):
    response = request.app.state.templates.TemplateResponse(
        request, template, {**context, "alternate": alternate}
    )
    if alternate:
        response.headers["Link"] = f'<{alternate}>; rel="alternate"; type="application/json"'
    return response


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: SessionDep):
    return _render(
        request, "home.html", {"entry_count": storage.count_entries(session)}, "/api/v1/health"
    )


@router.get("/search", response_class=HTMLResponse)
def search_page(
    request: Request,
    service: SearchDep,
    settings: SettingsDep,
    q: str = Query("", max_length=2000),
    kind: str | None = None,
    tag: str | None = None,
    page: int = Query(1, ge=1),
):
    result = service.search(q, kind=kind, tag=tag, page=page, limit=settings.search_page_size)
    alternate = str(request.url.replace(path="/api/v1/search").path)
    if request.url.query:
        alternate += "?" + request.url.query
    return _render(
        request,
        "search.html",
        {"result": result, "q": q, "kind": kind, "tag": tag},
        alternate,
    )


@router.get("/entries/{entry_id}", response_class=HTMLResponse)
def entry_page(request: Request, entry_id: str, session: SessionDep):
    details = get_entry_details(session, entry_id)
    if details is None:
        raise HTTPException(404, f"There is no entry {entry_id!r}. Try searching for it.")
    return _render(request, "entry.html", {"entry": details}, f"/api/v1/entries/{entry_id}")
