"""The MCP server over streamable HTTP at /mcp, behind the API's bearer tokens.

Stateless (no MCP session is kept between requests), so any replica answers any request; JSON
responses. The session manager runs in the app's lifespan. A request without a valid token is a
401 before the MCP layer sees it; a read token may look things up, reporting an outcome needs a
write token. DNS-rebinding protection accepts the loopback names and PITFALLS_PUBLIC_URL's host.
"""

import json
from urllib.parse import urlsplit

from anyio import to_thread
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from sqlmodel import Session
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.accounts import SCOPE_ROLE, token_principal
from app.answer_sources import LocalPitfalls
from app.mcp_server import build_server, current_principal

MCP_PATH = "/mcp"


def _check_scope(scope: str) -> None:
    principal = current_principal.get()
    if principal is None or not principal.has_role(SCOPE_ROLE[scope]):
        raise ToolError(f"this tool needs a {scope} token; the token sent does not allow it")


class BearerOnly:
    """Lets a request through only with a valid API token, and names its principal."""

    def __init__(self, app: ASGIApp, engine_of) -> None:
        self.app = app
        self.engine_of = engine_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1").strip()
        kind, _, secret = auth.partition(" ")
        principal = None
        if kind.lower() == "bearer" and secret.strip():

            def lookup():
                with Session(self.engine_of()) as session:
                    found = token_principal(session, secret.strip())
                    session.commit()  # the token's last use
                    return found

            principal = await to_thread.run_sync(lookup)
        if principal is None:
            body = json.dumps(
                {
                    "error": {
                        "status": 401,
                        "message": "Send an API token: Authorization: Bearer "
                        "<token> (create one with `pitfalls token create`).",
                    }
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        token = current_principal.set(principal)
        try:
            await self.app(scope, receive, send)
        finally:
            current_principal.reset(token)


def mcp_route(app) -> tuple[Route, object]:
    """The /mcp route for `app` and the MCP server's session manager (run it in the lifespan)."""
    settings = app.state.settings
    pitfalls = LocalPitfalls(app.state, voter=lambda: current_principal.get().label)
    server = build_server(pitfalls, check_scope=_check_scope)
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
    guarded = BearerOnly(inner, lambda: app.state.engine)
    return Route(MCP_PATH, endpoint=guarded, methods=["GET", "POST", "DELETE"]), server
