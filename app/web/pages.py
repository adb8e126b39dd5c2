"""Server-rendered pages; each calls the same function as its JSON twin under /api/v1."""

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from app import storage
from app.answers import answer_query
from app.catalog import get_overview, get_tag_page
from app.entry_details import fix_first, get_entry_details, table_of_contents
from app.web.auth import read_access
from app.web.deps import SearchDep, SessionDep, SettingsDep
from app.web.paths import public_base, see_other, site_path
from app.web.twins import twin_path

router = APIRouter(include_in_schema=False, dependencies=[Depends(read_access)])
QUERY_CHARS = 2000  # a search; longer text in the search box is a paste, answered on /match
PASTE_QUERY_CHARS = 16_000  # what a URL carries through the server


def render(
    request: Request,
    template: str,
    context: dict,
    alternate: str | None = None,
    status_code: int = 200,
):
    # The JSON twin comes from the one table of twins; `alternate` only for a page outside it.
    alternate = twin_path(request) or alternate
    response = request.app.state.templates.TemplateResponse(
        request, template, {**context, "alternate": alternate}, status_code=status_code
    )
    if alternate:
        link = site_path(request, alternate)
        response.headers["Link"] = f'<{link}>; rel="alternate"; type="application/json"'
    return response


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: SessionDep, service: SearchDep):
    overview = get_overview(session, service)
    return render(request, "home.html", {"overview": overview}, "/api/v1/overview")


@router.get("/tags/{tag}", response_class=HTMLResponse)
def tag_page(request: Request, tag: str, service: SearchDep):
    listing = get_tag_page(service, tag)
    return render(request, "tag.html", {"listing": listing}, f"/api/v1/tags/{tag}")


@router.get("/help", response_class=HTMLResponse)
def help_page(request: Request):
    return render(request, "help.html", {})


@router.get("/entries/{entry_id}/snippets/{position}.py")
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


@router.get("/opensearch.xml")
def opensearch(request: Request) -> Response:
    base = public_base(request)
    body = request.app.state.templates.get_template("opensearch.xml").render(base=base)
    return Response(body, media_type="application/opensearchdescription+xml")


@router.get("/search", response_class=HTMLResponse)
def search_page(
    request: Request,
    service: SearchDep,
    settings: SettingsDep,
    q: str = Query("", max_length=PASTE_QUERY_CHARS),
    kind: str | None = None,
    tag: str | None = None,
    page: int = Query(1, ge=1, le=10_000),
    exact: bool = False,
):
    if "\n" in q.strip() or len(q) > QUERY_CHARS:
        # A traceback pasted into the search box: the paste's answer, not a text search.
        return see_other(request, "/match?" + urlencode({"text": q}))
    result = service.search(
        q, kind=kind, tag=tag, page=page, limit=settings.search_page_size, correct=not exact
    )
    # Error text typed or pasted into the search box is matched first, as on /match: a query
    # holds at most 2,000 characters, so this costs about what the search does.
    state = request.app.state
    answer = (
        answer_query(q, engine=state.engine, matcher=state.matchers.current())
        if page == 1
        else None
    )
    alternate = str(request.url.replace(path="/api/v1/search").path)
    if request.url.query:
        alternate += "?" + request.url.query
    return render(
        request,
        "search.html",
        {"result": result, "q": q, "kind": kind, "tag": tag, "answer": answer},
        alternate,
    )


@router.get("/entries/{entry_id}", response_class=HTMLResponse)
def entry_page(request: Request, entry_id: str, session: SessionDep):
    details = get_entry_details(session, entry_id)
    if details is None:
        raise HTTPException(404, f"There is no entry {entry_id!r}. Try searching for it.")
    first, rest = fix_first(details.html)
    toc = table_of_contents(first + rest)
    context = {"entry": details, "first": first, "rest": rest, "toc": toc}
    return render(request, "entry.html", context, f"/api/v1/entries/{entry_id}")
