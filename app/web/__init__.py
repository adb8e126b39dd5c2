"""The FastAPI application factory: nothing is opened until `create_app` runs."""

import contextlib
import gc
import os
import re
import sys
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial

import anyio
from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Route
from swagger_ui.utils import SWAGGER_UI_PY_ROOT

from app import __version__
from app.answers import MatcherCache
from app.bootstrap import prepare_data
from app.change_feed import FeedFollower
from app.outcomes import ReportRules
from app.redaction import load_rules
from app.resources import resource_dir
from app.search import IndexUnavailable, SearchService
from app.settings import Settings, load_settings
from app.storage import create_db_engine, schema_is_current, setup_lock, upgrade_schema
from app.web import accounts, changes, entries, match, ops, search, tags, webhooks
from app.web.accounts.oidc import make_client
from app.web.auth import SESSION_COOKIE, csrf_token, page_principal, session_secret
from app.web.errors import install_error_handlers
from app.web.http import MCP_PATH, errors
from app.web.mcp_loading import LazyMcp
from app.web.middleware.allow import AllowHeader
from app.web.middleware.caching import AnswerCache, MarkReader, ReaderCache
from app.web.middleware.headers import SecurityHeaders
from app.web.middleware.observe import Observe
from app.web.middleware.paste_shortcut import PasteShortcut
from app.web.middleware.twins import JsonTwins
from app.web.offload import WriteQueue
from app.web.runtime import Runtime
from app.webhooks import DeliveryRules, WebhookWorker


def _atom_date(moment: datetime | None) -> str:
    # Stored times are UTC (SQLite hands them back without a zone).
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


_LONG_WORD = re.compile(r"\S{16,}")


def _breakable(text: str) -> Markup:
    """Escaped, with a line-break opportunity after each dot or underscore of a long word
    (`torch.OutOfMemoryError)`): a narrow screen breaks a title there, not before its last
    character."""
    return Markup(
        _LONG_WORD.sub(
            lambda word: re.sub(r"([._])(?=\w)", r"\1<wbr>", word.group()), str(escape(text))
        )
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()

    # The schema first (under the set-up lock): the session key may live in the database.
    engine = create_db_engine(settings)
    if not schema_is_current(engine):  # a prepared data dir (`pitfalls serve`) skips Alembic
        with setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
            upgrade_schema(engine)
    secret = session_secret(settings, engine)
    engine.dispose()  # no connection stays open until the app starts

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # `pitfalls serve` has already prepared the data; this covers `uvicorn --factory` use.
        # Start-up's database work runs in a thread, like every request's (never on the loop).
        await anyio.to_thread.run_sync(partial(prepare_data, settings, engine, ingest="if-empty"))
        # Pastes get threads of their own, as many as there are cores: a burst of them queues
        # there instead of taking the threads that every other route needs.
        cores = os.cpu_count() or 2
        assert settings.index_dir is not None  # the settings put it in the data dir
        runtime = Runtime(
            settings=settings,
            engine=engine,
            templates=templates,
            report_rules=report_rules,
            marks=MarkReader(),
            answers=AnswerCache(),
            writes=WriteQueue(
                at_once=1 if engine.url.get_backend_name() == "sqlite" else settings.db_pool_size,
                wait_s=settings.write_queue_wait_ms / 1000,
            ),
            search=SearchService(
                settings.index_dir,
                engine,
                check_interval_ms=settings.index_check_interval_ms,
                budget_ms=settings.search_budget_ms,
                search_engine=settings.search_engine,
            ),
            matchers=MatcherCache(engine, settings.index_check_interval_ms),
            paste_limiter=anyio.CapacityLimiter(max(2, cores)),
            search_limiter=anyio.CapacityLimiter(max(2, cores)),
            password_limiter=anyio.CapacityLimiter(max(1, cores // 2)),
            oidc=make_client(settings),
        )
        app.state.runtime = runtime
        # A paste or search thread busy in Python makes the event loop wait up to this long
        # for the GIL at each of its system calls; 5 ms by default adds up to 100s of ms.
        sys.setswitchinterval(0.001)

        # Compile the matcher and open a searcher before the first request, not during it: RE2
        # compiles holding the GIL, which would stall every other request for that time.
        def warm_up() -> None:
            runtime.matchers.current()
            with contextlib.suppress(IndexUnavailable):
                runtime.search.search("cuda", limit=1, highlights=False, facets=False)
            if settings.inbox:
                load_rules()

        await anyio.to_thread.run_sync(warm_up)
        # What start-up built (imports, the matcher, the index's readers) lives as long as the
        # process: kept out of the collector's full passes, which otherwise walk all of it,
        # holding the GIL (130 ms at 150 entries), whenever enough new objects have piled up, so
        # any request could stall every other for that long. Objects freed later by reference
        # counting still go; cycles among them wait for the shutdown's unfreeze.
        gc.collect()
        gc.freeze()

        follower = FeedFollower(engine, settings.index_check_interval_ms, runtime.refresh)
        follower.start()
        runtime.follower = follower
        if settings.webhook_worker:
            # Deliveries go out from a thread of their own, never from a request's.
            runtime.webhooks = WebhookWorker(
                engine, DeliveryRules.of(settings), settings.webhook_poll_interval_ms
            )
            runtime.webhooks.start()
        try:
            async with anyio.create_task_group() as beside:
                beside.start_soon(lazy_mcp.run)  # imports the MCP SDK once the app serves
                try:
                    yield
                finally:
                    beside.cancel_scope.cancel()
        finally:
            if runtime.webhooks is not None:
                runtime.webhooks.stop()
            follower.stop()
            runtime.search.close()
            engine.dispose()
            gc.unfreeze()  # a process that starts apps again (tests) gets its memory back

    app = FastAPI(
        title="Pitfalls",
        version=__version__,
        description="A searchable knowledge base of PyTorch pitfalls.",
        lifespan=lifespan,
        docs_url=None,  # served by app.web.ops from local files, not a CDN
        redoc_url=None,
        root_path=settings.root_path,
    )
    # Answer tokens are signed with the session's key (salted apart): every replica shares it.
    report_rules = ReportRules.of(settings, secret)
    templates = Jinja2Templates(
        directory=str(resource_dir("templates")), context_processors=[_root_context]
    )
    templates.env.globals.update(principal=page_principal, csrf_token=csrf_token)
    templates.env.filters["atom_date"] = _atom_date
    templates.env.filters["breakable"] = _breakable
    app.mount(
        "/static/swagger-ui",
        StaticFiles(directory=str(SWAGGER_UI_PY_ROOT / "static")),
        name="swagger-ui",
    )
    app.mount("/static", StaticFiles(directory=str(resource_dir("static"))), name="static")
    # The paste route lives with its page; what it can answer is documented here, like the API's.
    # First: routes are tried in order, and a bot's repeated paste should not pay for the others.
    app.include_router(match.router, responses=errors(400, 401, 413, 422, 503))
    app.include_router(ops.open_router)
    # Each URL family's API, then its pages (`app/web/<family>.py`).
    api_routers = [
        search.api_router,
        tags.api_router,
        *entries.api_routers,
        changes.api_router,
        match.outcome_router,
        *accounts.api_routers,
        webhooks.api_router,
        ops.api_router,
    ]
    page_routers = [
        *accounts.page_routers,
        webhooks.page_router,
        *entries.page_routers,
        tags.page_router,
        changes.page_router,
        search.page_router,
        ops.page_router,
    ]
    for router in (*api_routers, *page_routers):
        app.include_router(router)
    lazy_mcp = LazyMcp(app, settings)
    app.router.routes.append(Route(MCP_PATH, endpoint=lazy_mcp, methods=["GET", "POST", "DELETE"]))
    install_error_handlers(app)

    app.add_middleware(SecurityHeaders)
    app.add_middleware(AllowHeader)  # a 405's Allow names every method of the path
    # Signed (not encrypted) cookie holding a login session's key and the CSRF token; HttpOnly
    # always, SameSite=Lax so that other sites' forms do not carry it.
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret,
        session_cookie=SESSION_COOKIE,
        max_age=settings.session_days * 86400,
        same_site="lax",
        https_only=settings.secure_cookies,
        path=settings.root_path or "/",
    )
    # Outside the sessions: a page that sets a cookie is seen, and never kept.
    app.add_middleware(ReaderCache)
    # A paste answered before, from an anonymous caller: answered from memory, like a page.
    app.add_middleware(PasteShortcut)
    # A page's JSON twin (`.json`, or Accept) becomes a request for its API route before
    # anything keyed on the path (the reader cache, the routes) sees it.
    app.add_middleware(JsonTwins)
    app.add_middleware(Observe)  # outermost: the request id is set before anything logs
    return app


def _root_context(request: Request) -> dict:
    """`root`: the path the app is served under ("" at the top of a host, "/kb" under a proxy's
    sub-path), prefixed to every link, form and asset so that pages work under a sub-path and,
    being relative to the host, behind an HTTPS proxy."""
    return {"root": request.scope.get("root_path", "").rstrip("/")}
