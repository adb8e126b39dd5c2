"""Search: the home page, the search page and its JSON twin, and OpenSearch."""

from urllib.parse import urlencode

import anyio
from fastapi import Query, Request, Response
from fastapi.responses import HTMLResponse

from app.answers import search_answer, search_with_matches
from app.catalog import get_overview
from app.web import routers
from app.web.deps import SearchDep, SessionDep, SettingsDep
from app.web.http import errors, public_base, render, see_other
from app.web.runtime import runtime_of

api_router = routers.api_router()

page_router = routers.page_router()


@api_router.get("/search", summary="Full-text search over the entries", responses=errors(422, 503))
async def search(
    request: Request,
    service: SearchDep,
    settings: SettingsDep,
    q: str = Query(
        "",
        description="Words, an error message or an identifier; empty lists every entry",
        max_length=2000,
        examples=["batches tracked", "torch.cuda.FloatTensor", "显存"],
    ),
    kind: str | None = Query(None, description="Only entries of this kind", examples=["error"]),
    tag: str | None = Query(
        None, description="Only entries with this tag", examples=["checkpoint"]
    ),
    page: int = Query(1, ge=1, le=10_000),
    limit: int | None = Query(None, ge=1, le=200),
    exact: bool = Query(
        False,
        description="Search the words as typed: no spelling correction (by default a query "
        "that finds nothing, or only some of its words, is answered with the corrected "
        "query's results and `corrected_from` holds what was typed)",
    ),
) -> dict:
    # Error text is matched as well as searched: its known and likely entries, best first.
    state = runtime_of(request)

    def work() -> dict:
        return search_with_matches(
            service,
            q,
            engine=state.engine,
            matcher=state.matchers.current(),
            kind=kind,
            tag=tag,
            page=page,
            limit=limit or settings.search_page_size,
            correct=not exact,
        )

    # As many searches at once as there are cores: more threads only take turns at the GIL.
    return await anyio.to_thread.run_sync(work, limiter=state.search_limiter)


QUERY_CHARS = 2000  # a search; longer text in the search box is a paste, answered on /match


PASTE_QUERY_CHARS = 16_000  # what a URL carries through the server


@page_router.get("/", response_class=HTMLResponse)
def home(request: Request, session: SessionDep, service: SearchDep):
    overview = get_overview(session, service)
    return render(request, "home.html", {"overview": overview}, "/api/v1/overview")


@page_router.get("/search", response_class=HTMLResponse)
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
    # Error text typed or pasted into the search box is matched first, as on /match (a query
    # holds at most 2,000 characters, so this costs about what the search does), and the
    # entries it matches lead the results.
    state = runtime_of(request)
    result, answer = search_answer(
        service,
        q,
        engine=state.engine,
        matcher=state.matchers.current(),
        kind=kind,
        tag=tag,
        page=page,
        limit=settings.search_page_size,
        correct=not exact,
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


@page_router.get("/opensearch.xml")
def opensearch(request: Request) -> Response:
    base = public_base(request)
    body = runtime_of(request).templates.get_template("opensearch.xml").render(base=base)
    return Response(body, media_type="application/opensearchdescription+xml")
