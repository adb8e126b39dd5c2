"""405 answers whose `Allow` lists every method the path takes.

Starlette answers a method no route takes with the `Allow` of the first route whose path matched,
so `POST /api/v1/entries/x` said `Allow: GET` although PUT and DELETE work there too (each method
is its own route). This middleware rewrites the header from all the routes at that path.
"""

from collections.abc import Iterable

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.middleware.twins import route_path

METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _routes(app) -> Iterable:
    try:  # FastAPI 0.16x includes routers lazily; this walks them as the router does
        from fastapi.routing import iter_route_contexts

        return iter_route_contexts(app.routes)
    except ImportError:
        return app.routes


def allowed_methods(app, path: str) -> list[str]:
    """The methods of every route whose path template matches `path`, in the usual order."""
    methods: set[str] = set()
    for route in _routes(app):
        template, route_methods = getattr(route, "path", None), getattr(route, "methods", None)
        if template and route_methods and compile_path(template)[0].match(path):
            methods |= set(route_methods)
    return sorted(methods, key=lambda m: (m not in METHOD_ORDER, (*METHOD_ORDER, m).index(m), m))


class AllowHeader:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                path = route_path(scope)
                methods = allowed_methods(scope["app"], path)
                if methods:
                    kept = message.get("headers", [])
                    headers = [(k, v) for k, v in kept if k.lower() != b"allow"]
                    headers.append((b"allow", ", ".join(methods).encode("latin-1")))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_allow)
