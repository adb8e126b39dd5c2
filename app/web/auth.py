"""Who is asking, and may they: sessions, bearer tokens, CSRF and the role checks routes declare.

A route that writes asks for `Depends(require("editor"))` (or "admin"). The check runs before the
body is read, so a refused caller never gets as far as validation. Browser sessions must also
send the CSRF token of their session, as a form field or an `X-CSRF-Token` header; bearer
tokens carry no ambient authority and need none.

Only the `Bearer` scheme of `Authorization` is read. Any other (a proxy's `Basic` login, which a
browser sends by itself) is ignored: it neither refuses a public page nor stands in for the CSRF
token.

The session cookie is signed and holds a random key; the login it stands for lives in the
database (`login_session`), so logging out ends the key for whoever else has a copy.
"""

import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from app.accounts import (
    ANONYMOUS,
    AccountDisabled,
    Principal,
    admin_names,
    end_login_session,
    login_session_user,
    start_login_session,
    token_principal,
    user_principal,
)
from app.answer_tokens import app_secret
from app.errors import PitfallsError
from app.models import User
from app.settings import Settings
from app.web.http import decoded, form_fields_of, read_write_body
from app.web.runtime import runtime_of

SESSION_COOKIE = "pitfalls_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


# What the API answers (401) a caller who sent no token where reading needs one.
TOKEN_REQUIRED = (
    "Authentication required: send 'Authorization: Bearer <token>' "
    "(create one with `pitfalls token create`)."
)


class LoginRequired(PitfallsError):
    """The caller is anonymous and must log in (pages) or present a token (API). A page's GET
    is sent to the login form instead (`app.web.errors`)."""

    status = 401

    def __init__(self, message: str = "Log in first; nothing was saved.") -> None:
        super().__init__(message)


def session_secret(settings: Settings, engine: Engine) -> str:
    """The key that signs session cookies: the app's secret (`app.answer_tokens.app_secret`)."""
    return app_secret(settings, engine)


def bearer_token(request: Request) -> str | None:
    """The credentials of `Authorization: Bearer ...` ("" when empty); None for any other scheme."""
    scheme, _, credentials = request.headers.get("authorization", "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def _bearer(request: Request, secret: str) -> Principal:
    challenge = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
    if not secret:
        raise HTTPException(401, "Send the token as 'Authorization: Bearer <token>'.", challenge)
    with Session(runtime_of(request).engine) as session:
        try:
            principal = token_principal(session, secret)
        except AccountDisabled as exc:
            raise HTTPException(403, str(exc)) from None
        try:
            session.commit()  # the token's last use
        except OperationalError:  # a hint, not worth failing the request (SQLite busy)
            session.rollback()
    if principal is None:
        raise HTTPException(401, "The token is unknown, expired or revoked.", challenge)
    return principal


def _session_user(request: Request) -> Principal:
    if "session" not in request.scope:  # an error page rendered outside the session middleware
        return ANONYMOUS
    key = request.session.get("sid")
    if not key:
        if "uid" in request.session:  # a cookie from before sessions were kept server-side
            request.session.clear()
        return ANONYMOUS
    with Session(runtime_of(request).engine) as session:
        user = login_session_user(session, key)
    if user is None:
        request.session.clear()  # logged out, expired, or the password changed since
        return ANONYMOUS
    return user_principal(user)


def get_principal(request: Request) -> Principal:
    """The caller, looked up once per request."""
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    secret = bearer_token(request)
    principal = _bearer(request, secret) if secret is not None else _session_user(request)
    request.state.principal = principal
    return principal


def page_principal(request: Request) -> Principal:
    """For showing who is logged in on a page: never raises."""
    try:
        return get_principal(request)
    except HTTPException:
        return ANONYMOUS


def log_in(request: Request, user: User) -> None:
    """Start a session for `user` (a database write: call it from a worker thread)."""
    lifetime = timedelta(days=runtime_of(request).settings.session_days)
    with Session(runtime_of(request).engine) as session:
        key = start_login_session(session, user, lifetime=lifetime)
        session.commit()
    request.session.clear()  # a new key and CSRF token for the new privilege level
    request.session.update({"sid": key, "csrf": _new_token()})
    request.state.principal = user_principal(user)


def log_out(request: Request) -> None:
    """End the session in the database too, so that a copy of the cookie is worth nothing."""
    key = request.session.get("sid")
    if key:
        with Session(runtime_of(request).engine) as session:
            end_login_session(session, key)
            session.commit()
    request.session.clear()
    request.state.principal = ANONYMOUS


def _new_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(request: Request) -> str:
    """The session's CSRF token, created on first use (this is what sets an anonymous cookie)."""
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = _new_token()
    return token


async def form_fields(request: Request) -> dict[str, str]:
    """The urlencoded form of the request (first value of each field), read once, size-limited."""
    cached = getattr(request.state, "form", None)
    if cached is not None:
        return cached
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict[str, str] = {}
    if content_type == "application/x-www-form-urlencoded":
        body = await read_write_body(request, "form")
        fields = await decoded(len(body), form_fields_of, body)
    request.state.form = fields
    return fields


async def check_csrf(request: Request) -> None:
    """Refuse a write that a browser session makes without its CSRF token."""
    if bearer_token(request) is not None:  # a token is sent on purpose, never by a browser itself
        return
    expected = request.session.get("csrf")
    sent = request.headers.get(CSRF_HEADER) or (await form_fields(request)).get(CSRF_FIELD)
    if not expected or not sent or not secrets.compare_digest(expected, sent):
        raise HTTPException(
            403,
            "The form's security token is missing or out of date (CSRF check); "
            "reload the page and send it again. Nothing was saved.",
        )


def require(role: str, *, people_only: bool = False):
    """A dependency: the caller must have `role` (and, for browser writes, the CSRF token).

    `people_only`: a token is refused too (tokens do not make or revoke tokens).
    """

    async def dependency(request: Request) -> AsyncIterator[Principal]:
        principal = await caller(request)
        if not principal.authenticated:
            raise LoginRequired()
        if people_only and principal.kind != "user":
            raise HTTPException(403, "Log in as a person for this; API tokens cannot do it.")
        if not principal.has_role(role):
            raise HTTPException(403, await run_in_threadpool(_refusal, request, principal, role))
        writes = request.method not in ("GET", "HEAD", "OPTIONS")
        if writes:
            await check_csrf(request)
        yield principal
        if writes:
            # This process's next search and paste see the write at once, not an interval later.
            runtime_of(request).expire()

    dependency.__name__ = f"require_{role}"
    return dependency


def _refusal(request: Request, principal: Principal, role: str) -> str:
    """Why `principal` may not do what needs `role`, and the fix that really applies."""
    from app.web.http import site_path

    if principal.kind == "token" and role == "admin":
        return "API tokens cannot manage users; log in as an admin in the browser."
    if principal.kind == "token" and principal.scope == "read":
        return (
            "This token can only read; create a token with write scope on "
            f"{site_path(request, '/tokens')}."
        )
    with Session(runtime_of(request).engine) as session:
        admins = admin_names(session)
    who = " or ".join(admins) if admins else "an admin (`pitfalls user role NAME editor`)"
    if principal.kind == "token":  # a write token whose owner is no longer an editor
        return (
            f"This token's owner is now a {principal.role}, so the token can only read; "
            f"{who} can make them an editor again."
        )
    if role == "editor":
        return (
            f"Your role ({principal.role}) can read but not edit entries; "
            f"ask {who} to make you an editor."
        )
    return f"Only admins can do this, and your role is {principal.role}; admins: {who}."


def _needs_lookup(request: Request) -> bool:
    """Whether finding the caller reads the database (a token, or a session's key)."""
    if getattr(request.state, "principal", None) is not None:
        return False
    if bearer_token(request) is not None:
        return True
    return "session" in request.scope and bool(request.session.get("sid"))


async def caller(request: Request) -> Principal:
    """`get_principal` for a coroutine: the look-up (a token, a session's key) runs in a
    thread, and an anonymous caller, most requests, costs no trip to one."""
    if _needs_lookup(request):
        return await run_in_threadpool(get_principal, request)
    return get_principal(request)


async def read_access(request: Request) -> None:
    """Router-wide: with PITFALLS_PUBLIC_READ=false, reading needs a login or a token."""
    principal = await caller(request)  # a bad token is refused even when reading is public
    if not runtime_of(request).settings.public_read and not principal.has_role("reader"):
        raise LoginRequired()


def login_url(request: Request) -> str:
    """The login page, to come back to this page after (`next` is relative to the app)."""
    from app.web.http import app_path, site_path

    return site_path(request, f"/login?next={quote(app_path(request), safe='')}")


SignedIn = Annotated[Principal, Depends(require("reader", people_only=True))]
Editor = Annotated[Principal, Depends(require("editor"))]
Admin = Annotated[Principal, Depends(require("admin"))]
