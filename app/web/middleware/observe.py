"""Per request: an id, one log line, and the Prometheus counters, as pure ASGI middleware.

The id comes from the client's `X-Request-ID` when it is a sane token (a proxy's, so one id
follows a request through the proxy's log and ours), else a new one; it is sent back in the
response and put on every log record made while the request runs.
"""

import contextvars
import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import REQUEST_SECONDS, REQUESTS

logger = logging.getLogger("pitfalls.access")
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class RequestIdFilter(logging.Filter):
    """Puts the running request's id on every record as `request_id` ("-" outside requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class Observe:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _SANE_ID.match(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", rid.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "<unmatched>"
            method = scope["method"]
            REQUESTS.labels(route, method, str(status)).inc()
            REQUEST_SECONDS.labels(route, method).observe(elapsed)
            logger.info(
                "%s %s %d %.1fms",
                method,
                scope["path"],
                status,
                elapsed * 1000,
                extra={"status": status, "duration_ms": round(elapsed * 1000, 1)},
            )
            request_id.reset(token)
