"""Signing in through an OpenID Connect provider (Authlib's Starlette client).

`/login/oidc` sends the browser to the provider with an authorization-code request that carries
a state, a nonce and a PKCE challenge (S256), all kept in the signed session cookie until the
callback. `/login/oidc/callback` exchanges the code (with the PKCE verifier), has Authlib verify
the ID token against the provider's JWKS (signature, issuer, audience, expiry, nonce), then finds
or makes the account (`app.accounts.identities`) and starts a login session like a password
login does. Every failure is a page with a sentence: 400 for a callback this browser did not
start or a token that does not verify, 403 for a refusal, 503 when the provider cannot be
reached. Requests to the provider have a time limit (PITFALLS_OIDC_TIMEOUT_S).

Authlib, its HTTP client and joserfc are imported where a sign-in needs them: a site without
PITFALLS_OIDC_DISCOVERY_URL never loads them, and a start does not wait for them.
"""

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fastapi import HTTPException, Request
from sqlalchemy.exc import IntegrityError

from app.accounts import AccountDisabled, Identity, groups_of, sign_in_identity_once_settled
from app.settings import Settings
from app.web.auth import log_in
from app.web.http import public_base
from app.web.runtime import runtime_of

if TYPE_CHECKING:
    from authlib.integrations.starlette_client import StarletteOAuth2App

CLIENT_NAME = "oidc"
CALLBACK_PATH = "/login/oidc/callback"
NEXT_KEY = "oidc_next"  # where to go after the sign-in, kept in the session meanwhile
VIA_KEY = "via"  # "oidc" in a session started by the provider: logout may end its session too


def provider_down() -> tuple[type[Exception], ...]:
    """What a provider that cannot be reached raises: a refused connection, a timeout, a 5xx
    answer to the discovery or JWKS request, or a body that is not JSON."""
    import httpx2

    return (httpx2.HTTPError, json.JSONDecodeError)


class SignInFailed(Exception):
    """The sign-in cannot finish; `status` and the sentence go on the login page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def passwords_off(request: Request) -> str | None:
    """The refusal's sentence where PITFALLS_LOCAL_PASSWORDS is false, else None."""
    settings = runtime_of(request).settings
    if settings.local_passwords:
        return None
    return (
        "Passwords are turned off on this site: sign in with "
        f"{settings.oidc_provider_name} instead."
    )


def make_client(settings: Settings) -> "StarletteOAuth2App | None":
    """The provider's client, or None where PITFALLS_OIDC_DISCOVERY_URL is empty. Nothing is
    fetched until the first sign-in (the discovery document is then kept)."""
    if not settings.oidc_enabled:
        return None
    from authlib.integrations.starlette_client import OAuth, StarletteOAuth2App

    scopes = settings.oidc_scopes.split()
    if "openid" not in scopes:
        scopes.insert(0, "openid")
    client_kwargs: dict[str, object] = {
        "scope": " ".join(scopes),
        "code_challenge_method": "S256",
        "timeout": settings.oidc_timeout_s,
    }
    if not settings.oidc_client_secret:
        client_kwargs["token_endpoint_auth_method"] = "none"  # a public client: PKCE alone
    client = OAuth().register(
        CLIENT_NAME,
        server_metadata_url=settings.oidc_discovery_url,
        client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret or None,
        client_kwargs=client_kwargs,
    )
    assert isinstance(client, StarletteOAuth2App)
    return client


def client_of(request: Request) -> "StarletteOAuth2App":
    client = runtime_of(request).oidc
    if client is None:
        raise HTTPException(404, "Signing in with OpenID Connect is not set up on this site.")
    return client


def redirect_uri(request: Request) -> str:
    """The callback the provider sends the browser back to (register it with the provider)."""
    return public_base(request) + CALLBACK_PATH


def _unreachable(settings: Settings) -> SignInFailed:
    passwords = " or log in with your password" if settings.local_passwords else ""
    return SignInFailed(
        503,
        f"The sign-in provider ({settings.oidc_provider_name}) cannot be reached just now; "
        f"try again in a minute{passwords}.",
    )


async def start(request: Request, next_path: str):
    """The redirect to the provider's authorization endpoint."""
    client = client_of(request)
    request.session[NEXT_KEY] = next_path
    try:
        return await client.authorize_redirect(request, redirect_uri(request))
    except provider_down():
        raise _unreachable(runtime_of(request).settings) from None


async def _claims(request: Request, client: "StarletteOAuth2App") -> Mapping[str, object]:
    """The verified claims of the callback's ID token, the groups filled in from userinfo
    where the ID token leaves them out."""
    from authlib.common.errors import AuthlibBaseError
    from authlib.integrations.base_client import MismatchingStateError, OAuthError
    from joserfc.errors import JoseError

    settings = runtime_of(request).settings
    params = request.query_params
    if params.get("error"):
        said = params.get("error_description") or params["error"]
        raise SignInFailed(
            403,
            f"{settings.oidc_provider_name} did not sign you in ({said[:200]}); "
            "nothing changed here. Try again, or ask whoever runs the provider for access.",
        )
    try:
        token = await client.authorize_access_token(request)
    except MismatchingStateError:
        raise SignInFailed(
            400,
            "This sign-in was not started from this browser, or it was already used or has "
            "expired; start again from the login page.",
        ) from None
    except OAuthError as exc:
        raise SignInFailed(
            400,
            f"{settings.oidc_provider_name} refused to finish the sign-in "
            f"({(exc.description or exc.error or 'no reason given')[:200]}); start again from "
            "the login page.",
        ) from None
    except provider_down():
        raise _unreachable(settings) from None
    except (JoseError, AuthlibBaseError) as exc:
        raise SignInFailed(
            400,
            f"The ID token from {settings.oidc_provider_name} did not verify ({exc}); "
            "nobody was signed in.",
        ) from None
    claims = dict(token.get("userinfo") or {})
    if not claims.get("sub") or not claims.get("iss"):
        raise SignInFailed(
            400,
            f"{settings.oidc_provider_name} sent no ID token (is the openid scope allowed for "
            "this client?); nobody was signed in.",
        )
    if settings.oidc_groups_claim not in claims and client.server_metadata.get("userinfo_endpoint"):
        try:
            info = await client.userinfo(token=token)
        except provider_down():
            raise _unreachable(settings) from None
        except AuthlibBaseError:
            info = {}
        if info.get("sub") == claims["sub"] and settings.oidc_groups_claim in info:
            claims[settings.oidc_groups_claim] = info[settings.oidc_groups_claim]
    return claims


def identity_of(claims: Mapping[str, object], settings: Settings) -> Identity:
    return Identity(
        issuer=str(claims["iss"]),
        subject=str(claims["sub"]),
        preferred_username=str(claims.get("preferred_username") or ""),
        email=str(claims.get("email") or ""),
        groups=groups_of(claims.get(settings.oidc_groups_claim)),
    )


async def finish(request: Request) -> str:
    """Sign in the callback's user; returns the path to go to. SignInFailed otherwise."""
    client = client_of(request)
    next_path = request.session.get(NEXT_KEY) or "/"
    claims = await _claims(request, client)
    runtime = runtime_of(request)
    settings = runtime.settings
    identity = identity_of(claims, settings)

    def write() -> None:
        try:
            user = sign_in_identity_once_settled(
                runtime.engine,
                identity,
                role_map=settings.oidc_roles,
                default_role=settings.oidc_default_role,
            )
        except AccountDisabled as exc:
            raise SignInFailed(403, str(exc)) from None
        except IntegrityError:
            raise SignInFailed(503, "Signing in collided with other sign-ins; try again.") from None
        log_in(request, user)  # a new session: the state, the verifier and `next` are gone
        request.session[VIA_KEY] = CLIENT_NAME

    await runtime.writes.run(write)
    return next_path


def provider_logout_url(request: Request, via: str | None) -> str | None:
    """Where logging out sends the browser when PITFALLS_OIDC_PROVIDER_LOGOUT is on and the
    session came from the provider: its end_session_endpoint (as discovered at sign-in)."""
    runtime = runtime_of(request)
    if via != CLIENT_NAME or runtime.oidc is None or not runtime.settings.oidc_provider_logout:
        return None
    endpoint = runtime.oidc.server_metadata.get("end_session_endpoint")
    if not endpoint:
        return None
    from authlib.common.urls import add_params_to_uri

    params = {"client_id": runtime.settings.oidc_client_id}
    params["post_logout_redirect_uri"] = public_base(request) + "/"
    return add_params_to_uri(endpoint, params)
