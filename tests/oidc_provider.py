"""A small, real OpenID Connect provider for the sign-in tests, built on Authlib's server side.

    python -m tests.oidc_provider --port 8765 --client-id pitfalls --client-secret s3cret \
        --redirect-uri http://127.0.0.1:8000/login/oidc/callback

It serves, on 127.0.0.1, a plain WSGI app (the standard library's server, a thread a request):
the discovery document, /authorize (a tiny form: who signs in and with which groups; the browser
submits it, no password), /token, /jwks, /userinfo and /logout (an end_session_endpoint). The
authorization-code grant has the OpenID Connect extension (nonce required) and PKCE required,
S256 only: a token request without the code verifier is refused. The RS256 key is made at start.
It prints "ready <issuer>" once it listens.
"""

import argparse
import base64
import html
import json
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import ClassVar
from urllib.parse import parse_qsl
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from authlib.common.security import generate_token
from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, InvalidRequestError, OAuth2Error, OAuth2Request
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from joserfc.jwk import KeySet, RSAKey

SCOPES = ("openid", "profile", "email", "groups")


class FormRequest(OAuth2Request):
    """A request's parameters (query or form) as Authlib reads them."""

    def __init__(self, method: str, uri: str, data: dict[str, str], headers: dict) -> None:
        super().__init__(method, uri, headers=headers)
        self.payload = BasicOAuth2Payload(data)
        self._data = data

    @property
    def args(self):
        return self._data if self.method == "GET" else {}

    @property
    def form(self):
        return self._data if self.method == "POST" else {}


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uris: list[str]

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope):
        return " ".join(s for s in (scope or "").split() if s in SCOPES)

    def check_redirect_uri(self, redirect_uri):
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(self.client_secret, client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method == "client_secret_basic"

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type == "authorization_code"


@dataclass
class Person:
    username: str
    groups: list[str]
    groups_in_id_token: bool = True  # False: only /userinfo lists them, as some providers do

    @property
    def sub(self) -> str:
        return f"sub-{self.username}"


@dataclass
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    person: Person
    made_at: float = field(default_factory=time.time)

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def get_nonce(self):
        return self.nonce

    def get_auth_time(self):
        return int(self.made_at)

    def get_acr(self):
        return None

    def get_amr(self):
        return None


class Provider:
    """What the provider knows: its key, its one client, the codes and tokens it issued."""

    def __init__(self, issuer: str, client: Client) -> None:
        self.issuer = issuer
        self.client = client
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig"})
        self.codes: dict[str, Code] = {}
        self.nonces: set[str] = set()
        self.tokens: dict[str, tuple[Person, str]] = {}  # access token -> (person, scope)
        self.lock = threading.Lock()
        self.server = self._server()

    def _server(self) -> AuthorizationServer:
        provider = self

        class Server(AuthorizationServer):
            def query_client(self, client_id):
                return provider.client if client_id == provider.client.client_id else None

            def save_token(self, token, request):
                with provider.lock:
                    provider.tokens[token["access_token"]] = (request.user, token["scope"])

            def create_oauth2_request(self, request):
                return request  # the WSGI layer builds the OAuth2Request

            def handle_response(self, status, body, headers):
                if isinstance(body, dict):
                    body = json.dumps(body)
                return status, body, headers

            def send_signal(self, name, *args, **kwargs):
                pass

        class Grant(AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS: ClassVar = ["client_secret_basic"]

            def save_authorization_code(self, code, request):
                data = request.payload.data
                with provider.lock:
                    provider.codes[code] = Code(
                        code=code,
                        client_id=request.client.get_client_id(),
                        redirect_uri=data.get("redirect_uri", ""),
                        scope=request.scope,
                        nonce=data.get("nonce"),
                        code_challenge=data.get("code_challenge"),
                        code_challenge_method=data.get("code_challenge_method"),
                        person=request.user,
                    )
                    if data.get("nonce"):
                        provider.nonces.add(data["nonce"])

            def query_authorization_code(self, code, client):
                found = provider.codes.get(code)
                fresh = found is not None and time.time() - found.made_at < 300
                return found if fresh and found.client_id == client.get_client_id() else None

            def delete_authorization_code(self, authorization_code):
                with provider.lock:
                    provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code):
                return authorization_code.person

        class OpenIDCodeS(OpenIDCode):
            def exists_nonce(self, nonce, request):
                return nonce in provider.nonces

            def resolve_client_private_key(self, client):
                return provider.key

            def get_client_algorithm(self, client):
                return "RS256"

            def get_encode_header(self, client):
                return {"alg": "RS256", "kid": "test-key"}

            def get_client_claims(self, client):
                return {"iss": provider.issuer, "aud": [client.get_client_id()]}

            def generate_user_info(self, user, scope):
                return provider.user_info(user, scope, id_token=True)

        class S256Only(CodeChallenge):
            """PKCE for every client, S256 only. (Authlib asks a confidential client for the
            challenge only when it sent one; this provider refuses an authorization without.)"""

            SUPPORTED_CODE_CHALLENGE_METHOD: ClassVar = ["S256"]

            def validate_code_challenge(self, grant, redirect_uri):
                data = grant.request.payload.data
                if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
                    raise InvalidRequestError(
                        "PKCE is required: send code_challenge with code_challenge_method=S256",
                        redirect_uri=redirect_uri,
                    )
                super().validate_code_challenge(grant, redirect_uri)

        server = Server(scopes_supported=list(SCOPES))
        server.register_token_generator(
            "default", BearerTokenGenerator(lambda *args, **kwargs: generate_token(42))
        )
        server.register_grant(Grant, [OpenIDCodeS(require_nonce=True), S256Only(required=True)])
        return server

    def user_info(self, person: Person, scope: str, *, id_token: bool = False) -> UserInfo:
        info = UserInfo(sub=person.sub, preferred_username=person.username)
        if "email" in scope.split():
            info["email"] = f"{person.username}@example.test"
        if person.groups_in_id_token or not id_token:
            info["groups"] = person.groups
        return info

    def discovery(self) -> dict:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "end_session_endpoint": f"{self.issuer}/logout",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": list(SCOPES),
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["sub", "iss", "preferred_username", "email", "groups"],
        }

    # ---- the WSGI app --------------------------------------------------------------------

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO", "")
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        form: dict[str, str] = {}
        if method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(min(length, 100_000)).decode()
            form = dict(parse_qsl(body, keep_blank_values=True))
        headers = {
            key[5:].replace("_", "-").title(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if "CONTENT_TYPE" in environ:
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        try:
            status, body, out_headers = self.route(method, path, query, form, headers)
        except OAuth2Error as error:
            status, body, out_headers = 400, json.dumps(dict(error.get_body())), []
        reason = {200: "OK", 204: "No Content", 302: "Found", 303: "See Other", 400: "Bad Request"}
        out = [(str(k), str(v)) for k, v in out_headers]
        if not any(k.lower() == "content-type" for k, _ in out):
            kind = "text/html" if str(body).startswith("<") else "application/json"
            out.append(("Content-Type", f"{kind}; charset=utf-8"))
        start_response(f"{status} {reason.get(status, 'Error')}", out)
        return [str(body).encode()]

    def _request(self, method, path, data, headers) -> OAuth2Request:
        return FormRequest(method, f"{self.issuer}{path}", data, headers)

    def route(self, method, path, query, form, headers):
        if path == "/.well-known/openid-configuration":
            return 200, json.dumps(self.discovery()), []
        if path == "/favicon.ico":  # what a browser asks every site for
            return 204, "", [("Content-Type", "image/x-icon")]
        if path == "/jwks":
            return 200, json.dumps(KeySet([self.key]).as_dict(private=False)), []
        if path == "/authorize" and method == "GET":
            request = self._request("GET", path, query, headers)
            try:
                self.server.get_consent_grant(request)
            except OAuth2Error as error:
                return 400, json.dumps(dict(error.get_body())), []
            return 200, self.form_page(query), []
        if path == "/authorize" and method == "POST":
            person_fields = ("username", "groups", "deny", "userinfo_only")
            params = {k: v for k, v in form.items() if k not in person_fields}
            request = self._request("POST", path, params, headers)
            person = Person(
                form.get("username", "").strip(),
                [g.strip() for g in form.get("groups", "").split(",") if g.strip()],
                groups_in_id_token=not form.get("userinfo_only"),
            )
            user = None if form.get("deny") or not person.username else person
            grant = self.server.get_consent_grant(request, end_user=user)
            return self.server.create_authorization_response(request, user, grant)
        if path == "/token" and method == "POST":
            return self.server.create_token_response(self._request("POST", path, form, headers))
        if path == "/userinfo":
            scheme, _, token = headers.get("Authorization", "").partition(" ")
            found = self.tokens.get(token) if scheme.lower() == "bearer" else None
            if found is None:
                return 401, json.dumps({"error": "invalid_token"}), []
            return 200, json.dumps(self.user_info(*found)), []
        if path == "/logout":
            target = query.get("post_logout_redirect_uri") or self.issuer
            return 302, "", [("Location", target)]
        return 404, json.dumps({"error": "not_found"}), []

    def form_page(self, query: dict[str, str]) -> str:
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in query.items()
        )
        return (
            "<!doctype html><title>Test provider</title><form method=post action=/authorize>"
            f'{hidden}<label>User <input id="username" name="username"></label>'
            '<label>Groups <input id="groups" name="groups"></label>'
            '<label><input type="checkbox" id="userinfo-only" name="userinfo_only" value="1">'
            " Groups only from /userinfo</label>"
            '<button id="approve" type="submit">Sign in</button>'
            '<button id="deny" type="submit" name="deny" value="1">Deny</button></form>'
        )


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):  # the tests read no access log
        pass


def basic_auth(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--redirect-uri", action="append", required=True)
    args = parser.parse_args(argv)
    # The provider speaks plain HTTP on 127.0.0.1; Authlib refuses that unless told.
    os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"
    issuer = f"http://127.0.0.1:{args.port}"
    provider = Provider(issuer, Client(args.client_id, args.client_secret, args.redirect_uri))
    with make_server(
        "127.0.0.1", args.port, provider, server_class=_ThreadingServer, handler_class=_Quiet
    ) as server:
        print(f"ready {issuer}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
