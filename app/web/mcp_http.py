"""The MCP server over streamable HTTP at /mcp, with the same rights as the JSON API.

Imported only once the app is ready (app.web.mcp_loading): the SDK is a third of the web app's
imports. Stateless (no MCP session is kept between requests), so any replica answers any
request; JSON responses. The session manager runs beside the app, for as long as it runs. Who
may come in is decided by the API's own check (`app.web.auth.read_access`) before the MCP layer
sees the request: a bad token is a 401, a disabled account's token a 403; without a token, a
public site (PITFALLS_PUBLIC_READ) lets anyone in and a private one answers 401. Only a token
counts, never a browser's session cookie (a cookie is sent by itself; a token on purpose).
Whoever may read may report an outcome on an answer they got (with its token), as with `POST
/api/v1/outcomes`.

A refusal is a JSON-RPC error in a JSON body at the API's status, with the API's sentence as
its message: the official client shows a JSON-RPC error's message, and nothing of any other
body. DNS-rebinding protection accepts the loopback names and PITFALLS_PUBLIC_URL's host.
"""

import json
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.accounts import SCOPE_ROLE
from app.answer_sources import LocalPitfalls
from app.mcp_server import build_server, current_link_base, current_principal, current_voter
from app.settings import Settings
from app.storage import database_problem
from app.web.auth import TOKEN_REQUIRED, LoginRequired, get_principal, read_access
from app.web.http import MCP_ACCESS_REFUSED, MCP_PATH, public_base
from app.web.match import voter_of
from app.web.runtime import runtime_of


def scope_checker(settings):
    """`check_scope` for the tools: reading is open on a public site; the rest needs the
    token's scope."""

    def check_scope(scope: str) -> None:
        principal = current_principal.get()
        if scope == "read" and settings.public_read:
            return
        if principal is None or not principal.has_role(SCOPE_ROLE[scope]):
            raise ToolError(f"this tool needs a {scope} token; the token sent does not allow it")

    return check_scope


async def _refuse(
    send: Send, status: int, message: str, headers: dict[str, str] | None = None
) -> None:
    error = {"code": MCP_ACCESS_REFUSED, "message": message, "data": {"status": status}}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    raw = [(b"content-type", b"application/json")]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class McpAccess:
    """Lets a request through as the API would (`read_access`), names its principal, the voter
    its reports count for, and the site's address for the answers' links."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The API's look-up on a view of the request without its session (tokens only) and
        # with a state of its own (the principal is kept there for this request alone).
        view = {k: v for k, v in scope.items() if k != "session"} | {"state": {}}
        request = Request(view)
        try:
            await read_access(request)
            principal = get_principal(request)  # looked up by read_access, kept on its state
        except LoginRequired:
            await _refuse(send, 401, TOKEN_REQUIRED, {"WWW-Authenticate": "Bearer"})
            return
        except HTTPException as exc:  # a bad token (401), a disabled account's (403)
            await _refuse(send, exc.status_code, str(exc.detail), dict(exc.headers or {}))
            return
        except Exception as exc:
            problem = database_problem(exc)
            if problem is None:
                raise
            await _refuse(send, 503, problem, {"Retry-After": "30"})
            return
        tokens = (
            current_principal.set(principal),
            current_voter.set(voter_of(request)),
            current_link_base.set(public_base(request)),
        )
        try:
            await self.app(scope, receive, send)
        finally:
            current_principal.reset(tokens[0])
            current_voter.reset(tokens[1])
            current_link_base.reset(tokens[2])


def mcp_endpoint(app: FastAPI, settings: Settings) -> tuple[ASGIApp, Any]:
    """The /mcp endpoint for `app` and its MCP server (run its session manager beside it);
    app.web.mcp_loading builds them once the app is ready."""
    pitfalls = LocalPitfalls(_LiveRuntime(app), voter=current_voter.get)
    server = build_server(pitfalls, check_scope=scope_checker(settings))
    hosts = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*"]
    if settings.public_url:
        public = urlsplit(settings.public_url)
        hosts.append(public.netloc)
        origins.append(f"{public.scheme}://{public.netloc}")
    inner = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        ),
    )
    return McpAccess(inner), server


class _LiveRuntime:
    """The app's `Runtime`, looked up at each use: the /mcp route is built with the app, the
    runtime only in its lifespan."""

    def __init__(self, app: FastAPI) -> None:
        self._app = app

    def __getattr__(self, name: str):
        return getattr(runtime_of(self._app), name)
