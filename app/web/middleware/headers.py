"""The security headers that every response carries, error pages and 500s included."""

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# No inline script or style, nothing from elsewhere: every value on a page is escaped, and even an
# injected <script> would not run.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
SECURITY_HEADER_LIST = [
    (name.lower().encode("latin-1"), value.encode("latin-1"))
    for name, value in SECURITY_HEADERS.items()
]


def add_security_headers(response: Response, path: str = "") -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class SecurityHeaders:
    """Pure ASGI middleware: the headers are added to the response's start message, so the body
    streams through untouched (Starlette's BaseHTTPMiddleware would wrap every response in a
    task and a memory stream)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [
                    (name, value) for name, value in SECURITY_HEADER_LIST if name not in present
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
