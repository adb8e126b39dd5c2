"""Every page's JSON twin: its path with `.json` appended, or the page itself asked for with
`Accept: application/json`.

One table maps each page (its methods and path template) to the API route that returns the data
it shows. A pure ASGI middleware rewrites a request for a twin into a request for that route
before routing, so the twin *is* the API route: the same function, the same guards (a login,
the role, CSRF), the same query parameters and the same JSON error shape. No page keeps a copy.

Content negotiation: the JSON twin wins only when the Accept header prefers
`application/json` to `text/html` (a higher q, or the same q named more specifically); a
browser's default Accept, and `*/*`, keep the page. Such pages answer with `Vary: Accept`.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

GET = frozenset({"GET", "HEAD"})
SUFFIX = ".json"


@dataclass(frozen=True)
class Twin:
    page: str  # the page's path template
    api: str  # the API route's path template: the same parameters, the same query
    methods: frozenset[str] = GET
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", compile_path(self.page)[0])


# A literal path comes before a template that would also match it (/entries/new).
TWINS: tuple[Twin, ...] = (
    Twin("/", "/api/v1/overview"),
    Twin("/search", "/api/v1/search"),
    Twin("/match", "/api/v1/match", GET | {"POST"}),  # GET: how to paste; POST: the answer
    Twin("/help", "/api/v1/help"),
    Twin("/tags", "/api/v1/tags"),
    Twin("/tags/{tag}", "/api/v1/tags/{tag}"),
    Twin("/entries", "/api/v1/entries"),
    Twin("/entries/new", "/api/v1/drafts/new"),
    Twin("/entries/{entry_id}", "/api/v1/entries/{entry_id}"),
    Twin("/entries/{entry_id}/edit", "/api/v1/entries/{entry_id}/edit"),
    # The archive form's state is the entry it would archive (DELETE archives it).
    Twin("/entries/{entry_id}/archive", "/api/v1/entries/{entry_id}"),
    Twin("/entries/{entry_id}/history", "/api/v1/entries/{entry_id}/revisions"),
    Twin("/entries/{entry_id}/revisions/{number}", "/api/v1/entries/{entry_id}/revisions/{number}"),
    Twin("/entries/{entry_id}/diff", "/api/v1/entries/{entry_id}/diff"),
    Twin("/changes", "/api/v1/changes"),
    Twin("/inbox", "/api/v1/inbox"),
    Twin("/login", "/api/v1/me"),  # the state a client needs: who it is signed in as
    Twin("/account", "/api/v1/me"),
    Twin("/tokens", "/api/v1/tokens"),
    Twin("/admin", "/api/v1/users"),
    Twin("/admin/webhooks", "/api/v1/webhooks"),
    Twin("/admin/webhooks/deliveries", "/api/v1/webhooks/deliveries"),
    Twin("/docs", "/openapi.json"),
)

# HTML routes without a twin of their own, and why: each is a form's action that answers by
# redirecting to a page that has one (or shows that page again with an error), and the API
# offers the same action as JSON where it exists.
EXEMPT: dict[tuple[str, str], str] = {
    ("POST", "/login"): "logs in, then redirects; a bot uses a token (GET /api/v1/me says who)",
    ("POST", "/entries/new"): "saves, then redirects; the API's POST /api/v1/entries does it",
    ("POST", "/entries/check"): "the editor without JavaScript; POST /api/v1/drafts/check",
    ("POST", "/entries/{entry_id}/edit"): "saves, then redirects; PUT /api/v1/entries/{id}",
    (
        "POST",
        "/entries/{entry_id}/archive",
    ): "archives, then redirects; DELETE /api/v1/entries/{id}",
    (
        "POST",
        "/entries/{entry_id}/revisions/{number}/restore",
    ): "restores, then redirects; POST /api/v1/entries/{id}/revisions/{n}/restore",
    ("POST", "/tokens"): "creates a token; tokens are made by a person, in the browser or CLI",
    ("POST", "/admin/users"): "adds a user, then redirects; `pitfalls user add` does it too",
    ("POST", "/admin/users/{name}/role"): "changes a role, then redirects; `pitfalls user role`",
    ("POST", "/admin/users/{name}/disable"): "redirects; POST /api/v1/users/{name}/disable",
    ("POST", "/admin/users/{name}/enable"): "redirects; POST /api/v1/users/{name}/enable",
    ("POST", "/admin/users/{name}/password"): "shows /admin; POST /api/v1/users/{name}/password",
    ("POST", "/account/password"): "shows /account; POST /api/v1/me/password",
    ("GET", "/login/oidc"): "redirects to the sign-in provider; a bot uses a token instead",
    ("GET", "/login/oidc/callback"): "the provider's way back: signs in, then redirects",
    ("POST", "/admin/webhooks"): "shows /admin/webhooks; POST /api/v1/webhooks",
    ("POST", "/admin/webhooks/{hook_id}/remove"): "redirects; DELETE /api/v1/webhooks/{id}",
}


def route_path(scope: Scope) -> str:
    """The request's path inside the app, without the root path it is served under."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


def find_twin(method: str, path: str) -> str | None:
    """The API path (decoded, like `path`) of the page at `path` for `method`, or None when the
    page has no twin."""
    for twin in TWINS:
        if method in twin.methods:
            found = twin.pattern.match(path)
            if found:
                return twin.api.format(**found.groupdict())
    return None


def _page_of_suffix(path: str) -> str | None:
    """`/entries/x.json` -> `/entries/x`; `/.json` and `/index.json` -> `/` (home)."""
    if not path.endswith(SUFFIX):
        return None
    page = path[: -len(SUFFIX)]
    return "/" if page in ("", "/", "/index") else page


def twin_path(request: Request) -> str | None:
    """The twin of the page answering `request` (a POST shows the GET twin) with its query,
    relative to the app: for `Link: rel=alternate`. None for a page without one."""
    api = find_twin("GET", route_path(request.scope))
    if api is None:
        return None
    query = request.url.query
    return quote(api) + (f"?{query}" if query else "")


def _quality(accept: str) -> dict[str, tuple[int, float]]:
    """For JSON and HTML: the (specificity, q) of the most specific range of `accept` that
    covers each (RFC 9110 12.5.1); (-1, 0) when none does."""
    best = {"application/json": (-1, 0.0), "text/html": (-1, 0.0)}
    for part in accept.split(",")[:64]:
        media, *params = part.split(";")
        media = media.strip().lower()
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        for wanted, (specificity, _) in best.items():
            kind = wanted.split("/")[0]
            level = {wanted: 2, f"{kind}/*": 1, "*/*": 0}.get(media)
            if level is not None and level > specificity:
                best[wanted] = (level, q)
    return best


def prefers_json(accept: str) -> bool:
    quality = _quality(accept)
    json_level, json_q = quality["application/json"]
    html_level, html_q = quality["text/html"]
    return json_q > 0 and (json_q > html_q or (json_q == html_q and json_level > html_level))


class JsonTwins:
    """Routes a request for a page's twin to the API route that has its data."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = route_path(scope), scope["method"]
        negotiated = False
        page = _page_of_suffix(path)
        api = find_twin(method, page) if page is not None else None
        if api is None:
            api = find_twin(method, path)
            negotiated = api is not None
            if negotiated and not prefers_json(Headers(scope=scope).get("accept", "")):
                api = None  # the page itself; its answer still varies by Accept
        if api is not None:
            full = scope.get("root_path", "").rstrip("/") + api
            scope = {**scope, "path": full, "raw_path": quote(full).encode("latin-1")}
        if not negotiated:
            await self.app(scope, receive, send)
            return

        link = None
        if api is None:  # the page: it links its twin, however it was rendered
            twin = quote(find_twin("GET", path) or "")
            query = scope.get("query_string", b"").decode("latin-1")
            root = scope.get("root_path", "").rstrip("/")
            if twin:
                target = root + twin + (f"?{query}" if query else "")
                link = f'<{target}>; rel="alternate"; type="application/json"'

        async def send_with_vary(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.add_vary_header("Accept")
                if link and "link" not in headers:
                    headers["Link"] = link
            await send(message)

        await self.app(scope, receive, send_with_vary)


def app_routes(app) -> Iterable:
    """Every route of the app, routers included (FastAPI includes them lazily)."""
    try:
        from fastapi.routing import iter_route_contexts

        return iter_route_contexts(app.routes)
    except ImportError:
        return app.routes
