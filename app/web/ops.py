"""Running the site: health (open to load balancers), metrics, the API docs, and the help page
with its JSON (sections and every route)."""

import shutil
from datetime import UTC, datetime
from html.parser import HTMLParser

from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field
from sqlmodel import Session

from app import metrics, storage
from app.models import utc_iso
from app.search import SearchService
from app.search.index import read_state
from app.web import routers
from app.web.auth import read_access
from app.web.deps import SearchDep, SessionDep, SettingsDep
from app.web.http import render, site_path
from app.web.middleware.twins import app_routes
from app.web.runtime import runtime_of

api_router = routers.api_router()

page_router = routers.page_router(guarded=False)

# Health stays open: load balancers and uptime checks have no token.
open_router = routers.api_router(guarded=False)


MIN_FREE_DISK_BYTES = 50_000_000  # below this (or 2 % of a small disk) the disk counts as full


def disk_problem(settings) -> str | None:
    """Why saves will fail for lack of disk, or None."""
    try:
        usage = shutil.disk_usage(settings.data_dir)
    except OSError:
        return None  # no data folder yet (a PostgreSQL-only set-up): nothing to say
    free = usage.free
    if free < min(MIN_FREE_DISK_BYTES, usage.total // 50):
        return f"the data folder's disk has {free // 1_000_000} MB free; saves will fail"
    return None


def health_data(session: Session, settings, search: SearchService | None = None) -> dict:
    """Health, never an error itself: with the database down it says so, and what still works
    (search answers from this process's index)."""
    state = read_state(settings.index_dir)
    damaged = search.damaged if search is not None else None
    problems = []
    try:
        mark = storage.feed_mark(session)
        entries: int | None = storage.count_entries(session)
    except Exception as error:
        problem = storage.database_problem(error)
        if problem is None:
            raise
        session.rollback()
        mark, entries = None, None
        problems.append(f"database: {problem} Search still answers from the local index.")
    disk = disk_problem(settings)
    if disk:
        problems.append(f"disk: {disk}")
    index = None
    if state is not None:
        built = datetime.fromisoformat(state.updated_at)
        behind = None
        if mark is not None:
            behind = max(0, mark.count - state.count) if state.count >= 0 else mark.count
        index = {
            "seq": state.seq,
            "built_at": utc_iso(datetime.fromisoformat(state.built_at)),
            "updated_at": utc_iso(built),
            "age_seconds": round((datetime.now(UTC) - built).total_seconds(), 1),
            # changes in the feed this process's index has not applied yet (None: unknown)
            "behind": behind,
            "healthy": damaged is None,
            "problem": damaged,
        }
    if damaged:
        problems.append(f"index: {damaged}")
    return {
        "status": "ok" if index is not None and not problems else "degraded",
        "problems": problems,
        "entries": entries,
        "change_seq": mark.seq if mark is not None else None,
        "index": index,
    }


@open_router.get("/health", summary="Liveness and freshness: entries, change sequence, index age")
def health(session: SessionDep, settings: SettingsDep, service: SearchDep) -> dict:
    return health_data(session, settings, service)


@page_router.get("/metrics", dependencies=[Depends(read_access)])
def prometheus_metrics(session: SessionDep, settings: SettingsDep, search: SearchDep) -> Response:
    health = health_data(session, settings, search)
    if health["entries"] is not None:  # None while the database cannot be reached
        metrics.ENTRIES.set(health["entries"])
        metrics.CHANGE_SEQ.set(health["change_seq"])
    if health["index"] is not None:
        if health["index"]["behind"] is not None:
            metrics.INDEX_LAG.set(health["index"]["behind"])
        metrics.INDEX_AGE.set(health["index"]["age_seconds"])
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)


@page_router.get("/docs", response_class=HTMLResponse)
def api_docs(request: Request) -> HTMLResponse:
    return runtime_of(request).templates.TemplateResponse(request, "docs.html", {})


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


@api_router.get("/help", summary="The help page: its sections, and every route of the API")
def help_content(request: Request) -> HelpOut:
    # Only the page's own block is rendered: one text for the page and its twin.
    template = runtime_of(request).templates.get_template("help.html")
    context = template.new_context({"request": request, "root": site_path(request, "")})
    html = "".join(template.blocks["content"](context))
    return HelpOut(
        sections=help_sections(html),
        endpoints=api_endpoints(request.app),
        docs=site_path(request, "/docs"),
        openapi=site_path(request, "/openapi.json"),
    )


@page_router.get("/help", response_class=HTMLResponse, dependencies=[Depends(read_access)])
def help_page(request: Request):
    return render(request, "help.html", {})
