"""The MCP server over streamable HTTP at /mcp, with the same rights as the JSON API.

Stateless (no MCP session is kept between requests), so any replica answers any request; JSON
responses. The session manager runs in the app's lifespan. A bad token is a 401, a disabled
account's token a 403, before the MCP layer sees either; without a token, a public site
(PITFALLS_PUBLIC_READ) lets anyone in, as the API does, and a private one answers 401. Whoever
may read may report an outcome on an answer they got (with its token), as with
`POST /api/v1/outcomes`. DNS-rebinding protection accepts the loopback names and
PITFALLS_PUBLIC_URL's host.
"""

import json
from typing import Any
from urllib.parse import urlsplit

from anyio import to_thread
from fastapi import FastAPI
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from sqlmodel import Session
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.accounts import ANONYMOUS, SCOPE_ROLE, AccountDisabled, token_principal
from app.answer_sources import LocalPitfalls
from app.mcp_server import build_server, current_principal, current_voter
from app.settings import Settings
from app.web.runtime import runtime_of

MCP_PATH = "/mcp"
SEND_A_TOKEN = (
    "Send an API token: Authorization: Bearer <token> (create one with `pitfalls token create`)."
)


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


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"status": status, "message": message}}).encode()
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpAccess:
    """Lets a request through as the API would: with a valid token, or anonymous on a public
    site; names its principal and the voter its reports count for."""

    def __init__(self, app: ASGIApp, state: "_LiveRuntime") -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1").strip()
        kind, _, secret = auth.partition(" ")
        principal = None
        if kind.lower() == "bearer":
            if not secret.strip():
                await _refuse(send, 401, SEND_A_TOKEN)
                return

            def lookup():
                with Session(self.state.engine) as session:
                    found = token_principal(session, secret.strip())
                    session.commit()  # the token's last use
                    return found

            try:
                principal = await to_thread.run_sync(lookup)
            except AccountDisabled as exc:
                await _refuse(send, 403, str(exc))
                return
            if principal is None:
                await _refuse(send, 401, "The token is unknown, expired or revoked.")
                return
        elif self.state.settings.public_read:
            principal = ANONYMOUS
        else:
            await _refuse(send, 401, SEND_A_TOKEN)
            return
        client = scope.get("client")
        voter = (
            principal.label
            if principal.authenticated
            else f"addr:{client[0] if client else 'unknown'}"
        )
        tokens = current_principal.set(principal), current_voter.set(voter)
        try:
            await self.app(scope, receive, send)
        finally:
            current_principal.reset(tokens[0])
            current_voter.reset(tokens[1])


def mcp_route(app: FastAPI, settings: Settings) -> tuple[Route, Any]:
    """The /mcp route for `app` and the MCP server's session manager (run it in the lifespan)."""
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
    guarded = McpAccess(inner, _LiveRuntime(app))
    return Route(MCP_PATH, endpoint=guarded, methods=["GET", "POST", "DELETE"]), server


class _LiveRuntime:
    """The app's `Runtime`, looked up at each use: the /mcp route is built with the app, the
    runtime only in its lifespan."""

    def __init__(self, app: FastAPI) -> None:
        self._app = app

    def __getattr__(self, name: str):
        return getattr(runtime_of(self._app), name)
