"""A repeated anonymous paste answered before the routes (see `PasteShortcut`)."""

from fastapi import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PitfallsError
from app.web.http import decoded
from app.web.match import paste_body_limit, paste_text
from app.web.match import router as match_router
from app.web.middleware.caching import AnswerCache, current_mark, is_anonymous
from app.web.middleware.headers import SECURITY_HEADER_LIST
from app.web.middleware.twins import route_path


class PasteShortcut:
    """Pure ASGI: `POST /api/v1/match` from an anonymous reader of a public site, with a paste
    already answered under the current content mark (`AnswerCache`), is answered here, before
    the session, routing and dependencies: a CI job failing the same way again and again costs
    what the framework costs. Anything else (a new paste, a token, a cookie, a form, a body
    that is not a valid paste) goes on to the route untouched, its body replayed."""

    PATH = "/api/v1/match"
    CONTENT_TYPES = (b"application/json", b"text/plain", b"")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route = None  # the route's object, for /metrics: seen on the first pass-through

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        state = getattr(scope["app"].state, "runtime", None)  # None before the lifespan
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if (
            state is None
            or path != self.PATH
            or content_type not in self.CONTENT_TYPES
            or not is_anonymous(headers)
            or not await _route_guards_pass(scope)
        ):
            await self.app(scope, receive, send)
            return
        settings = state.settings
        limit = paste_body_limit(content_type.decode("latin-1"), settings)
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= limit:
            message = await receive()
            if message["type"] != "http.request":  # gone: let the app see it as it is
                await self.app(scope, _replay(chunks, receive, message), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        kept = None
        if not more and size <= limit:  # past the limit, the route answers 413
            try:
                text = await decoded(
                    size, paste_text, b"".join(chunks), content_type.decode("latin-1"), settings
                )
            except HTTPException:
                text = None
            if text is not None:
                kept = state.answers.get(AnswerCache.key(text, await current_mark(state)))
                scope.setdefault("state", {})["paste_text"] = text  # the route need not read it
        if kept is None or self._route is None:
            await self.app(scope, _replay(chunks, receive, None, more), send)
            self._route = self._route or scope.get("route")
            return
        scope["route"] = self._route  # counted in /metrics as the route's
        body = kept.json()
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADER_LIST,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})


def _replay(chunks: list[bytes], receive: Receive, last: Message | None, more: bool = False):
    """A `receive` that gives back what was read (one message), then reads on."""
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": more}]
    if last is not None:
        pending = [{**pending[0], "more_body": True}, last] if chunks else [last]

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _route_guards_pass(scope: Scope) -> bool:
    """Whether the paste route's own guards (its router's dependencies, `read_access` today)
    let this request through: the shortcut answers only what the route would, so a guard
    added to the route later holds here too. A refusal is left to the route to answer."""
    request = Request(scope)
    try:
        for guard in match_router.dependencies:
            if guard.dependency is not None:
                await guard.dependency(request)
    except (PitfallsError, HTTPException):
        return False
    return True
