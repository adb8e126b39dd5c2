"""The /mcp route, with the MCP server imported and built once the app is ready.

The MCP SDK is about a third of what the web app imports; a start that waited for it would
answer its first page a second later for a feature most requests never touch. So the app's
lifespan starts `LazyMcp.run` beside the server: LOAD_DELAY_S after the start (so that the import
does not compete with the start itself), or at the first request to /mcp if that comes sooner,
it imports app.web.mcp_http (and the SDK) in a worker thread, builds the server, and runs its
session manager for as long as the app runs. A request to /mcp that comes before that is done
waits for it, at most LOAD_WAIT_S, and is then
answered 503 with Retry-After, as the JSON-RPC error the client shows; a build that failed is
logged once and answers 503 the same way, so /mcp never hangs and never takes the site down.
"""

import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from app.web.http import MCP_ACCESS_REFUSED

if TYPE_CHECKING:
    from fastapi import FastAPI

    from app.settings import Settings

LOAD_DELAY_S = 1.0
LOAD_WAIT_S = 30.0
STILL_STARTING = "the MCP server is still starting; try again in a few seconds"
UNAVAILABLE = "the MCP server could not start on this site; its log says why"

logger = logging.getLogger(__name__)


class LazyMcp:
    """The /mcp endpoint: the MCP server's ASGI app once `run` has built it."""

    def __init__(self, app: "FastAPI", settings: "Settings") -> None:
        self._app = app
        self._settings = settings
        self._inner: ASGIApp | None = None
        self._done: anyio.Event | None = None
        self._wanted: anyio.Event | None = None
        self.failed = False

    def _build(self) -> tuple[ASGIApp, Any]:
        from app.web.mcp_http import mcp_endpoint

        return mcp_endpoint(self._app, self._settings)

    async def run(self) -> None:
        """Build the server (imports in a thread), then serve its sessions until cancelled."""
        done = self._event()
        with anyio.move_on_after(LOAD_DELAY_S):
            await self._wanted_event().wait()
        try:
            # abandoned on shutdown: a stop never waits for an import
            inner, server = await anyio.to_thread.run_sync(self._build, abandon_on_cancel=True)
        except Exception:
            logger.exception("the MCP server could not be built; /mcp answers 503")
            self.failed = True
            done.set()
            return
        async with server.session_manager.run():  # the /mcp transport's task group
            self._inner = inner
            done.set()
            await anyio.sleep_forever()

    def _event(self) -> anyio.Event:
        if self._done is None:  # made on the event loop, by whichever comes first
            self._done = anyio.Event()
        return self._done

    def _wanted_event(self) -> anyio.Event:
        if self._wanted is None:
            self._wanted = anyio.Event()
        return self._wanted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._inner is None and not self.failed:
            self._wanted_event().set()  # build now, if the delay is not over yet
            with anyio.move_on_after(LOAD_WAIT_S):
                await self._event().wait()
        if self._inner is None:
            message = UNAVAILABLE if self.failed else STILL_STARTING
            await _unavailable(send, message)
            return
        await self._inner(scope, receive, send)


async def _unavailable(send: Send, message: str) -> None:
    error = {"code": MCP_ACCESS_REFUSED, "message": message, "data": {"status": 503}}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"5")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
