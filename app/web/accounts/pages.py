"""Account pages: log in and out, one's account and tokens, and the admin page."""

from collections.abc import Callable
from functools import partial

import anyio
from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from app.accounts import (
    AccountDisabled,
    AccountError,
    Principal,
    TooManyAttempts,
    add_user,
    authenticate,
    change_own_password,
    create_token,
    disable_user,
    enable_user,
    get_user,
    list_tokens,
    list_users,
    parse_duration,
    recent_audit,
    reset_password,
    revoke_token,
    set_role,
    token_state,
)
from app.models import ROLES
from app.web import routers
from app.web.accounts import oidc
from app.web.auth import Admin, SignedIn, check_csrf, form_fields, log_in, log_out
from app.web.deps import SessionDep
from app.web.http import render, see_other
from app.web.runtime import runtime_of

page_router = routers.page_router(guarded=False)


def _safe_next(target: str | None) -> str:
    # Only a path on this site: never //evil.example, https://evil.example, or "/\t/evil.example"
    # (browsers drop tabs and newlines from URLs).
    if (
        not target
        or not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(c.isspace() or ord(c) < 32 for c in target)
    ):
        return "/"
    return target


def _login_page(
    request: Request, next: str, *, name: str = "", error: str | None = None, status: int = 200
):
    """The login form: the password form where passwords are on, the provider's button where
    OpenID Connect is set up, and the sentence of a refusal."""
    settings = runtime_of(request).settings
    context = {
        "next": next,
        "name": name,
        "error": error,
        "passwords": settings.local_passwords,
        "provider": settings.oidc_provider_name if settings.oidc_enabled else None,
    }
    return render(request, "login.html", context, status_code=status)


@page_router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/"):
    return _login_page(request, _safe_next(next))


@page_router.get("/login/oidc")
async def oidc_login(request: Request, next: str = "/"):
    """Off to the OpenID Connect provider; it sends the browser back to the callback."""
    target = _safe_next(next)
    try:
        return await oidc.start(request, target)
    except oidc.SignInFailed as exc:  # the page names who is logged in: a look-up, in a thread
        return await run_in_threadpool(
            partial(_login_page, request, target, error=exc.message, status=exc.status)
        )


@page_router.get(oidc.CALLBACK_PATH, name="oidc_callback")
async def oidc_callback(request: Request):
    """Back from the provider: the code exchanged, the ID token verified, the user signed in."""
    try:
        target = await oidc.finish(request)
    except oidc.SignInFailed as exc:
        next_path = _safe_next(request.session.pop(oidc.NEXT_KEY, None))
        return await run_in_threadpool(
            partial(_login_page, request, next_path, error=exc.message, status=exc.status)
        )
    return see_other(request, _safe_next(target))


@page_router.post("/login", response_class=HTMLResponse)
async def login(request: Request):
    refusal = oidc.passwords_off(request)
    if refusal:  # refused before anything is read or counted: there is no form to send
        return await run_in_threadpool(
            partial(_login_page, request, "/", error=refusal, status=403)
        )
    await check_csrf(request)
    form = await form_fields(request)
    name, target = form.get("name", "").strip(), _safe_next(form.get("next"))
    # The peer's address; behind a reverse proxy, uvicorn puts the X-Forwarded-For address here
    # when the proxy is trusted (--forwarded-allow-ips; none by default).
    address = request.client.host if request.client else "unknown"
    error, retry_after = "Wrong name or password.", None
    try:
        # argon2 takes tens of milliseconds of CPU: never on the event loop, and in threads of
        # its own, so that a burst of logins queues there instead of taking the threads of
        # every other route.
        user = await anyio.to_thread.run_sync(
            partial(
                authenticate,
                runtime_of(request).engine,
                name=name,
                password=form.get("password", ""),
                address=address,
            ),
            limiter=runtime_of(request).password_limiter,
        )
    except TooManyAttempts as exc:
        user, error, retry_after = None, f"Too many failed logins: {exc}.", exc.retry_after
    except AccountDisabled as exc:
        return _login_page(request, target, name=name, error=str(exc), status=403)
    if user is None:
        response = _login_page(
            request, target, name=name, error=error, status=401 if not retry_after else 429
        )
        if retry_after:
            response.headers["Retry-After"] = str(retry_after)
        return response
    await runtime_of(request).writes.run(log_in, request, user)
    return see_other(request, target)


@page_router.post("/logout")
async def logout(request: Request):
    await check_csrf(request)
    provider_logout = oidc.provider_logout_url(request, request.session.get(oidc.VIA_KEY))
    await run_in_threadpool(log_out, request)
    if provider_logout:
        # The provider's session ends too, and it sends the browser back here. A page that
        # moves on by itself, not a redirect: the form's policy (form-action 'self') would
        # stop a redirect to another site.
        context = {
            "provider_logout": provider_logout,
            "provider": runtime_of(request).settings.oidc_provider_name,
        }
        return render(request, "logged_out.html", context)
    return see_other(request, "/")


def _account_page(request: Request, session, principal: Principal, **extra):
    settings = runtime_of(request).settings
    context = {
        "user": get_user(session, principal.name),
        "error": None,
        "changed": False,
        "passwords": settings.local_passwords,
        "provider": settings.oidc_provider_name,
        **extra,
    }
    return render(request, "account.html", context, status_code=422 if extra.get("error") else 200)


@page_router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, session: SessionDep, principal: SignedIn):
    return _account_page(request, session, principal)


@page_router.post("/account/password", response_class=HTMLResponse)
async def account_password(request: Request, session: SessionDep, principal: SignedIn):
    refusal = oidc.passwords_off(request)
    if refusal:
        raise HTTPException(403, refusal)
    form = await form_fields(request)
    new = form.get("new_password", "")
    if new != form.get("repeat_password", ""):
        return await run_in_threadpool(
            _account_page, request, session, principal, error="The two new passwords differ."
        )
    address = request.client.host if request.client else "unknown"

    def write():
        try:
            user = change_own_password(  # argon2, twice: in this thread, off the event loop
                runtime_of(request).engine,
                name=principal.name,
                current=form.get("current_password", ""),
                new=new,
                address=address,
            )
        except AccountError as exc:
            return _account_page(request, session, principal, error=f"{str(exc).capitalize()}.")
        # Every session of the user ended with the old password; this one goes on under a new
        # key.
        log_in(request, user)
        return _account_page(request, session, principal, changed=True)

    try:
        return await runtime_of(request).writes.run(write)
    except TooManyAttempts as exc:
        raise HTTPException(
            429, f"Too many wrong passwords: {exc}.", {"Retry-After": str(exc.retry_after)}
        ) from None


def _tokens_page(request: Request, session, principal: Principal, **extra):
    owner = None if principal.has_role("admin") else principal.name
    tokens = [(t, token_state(t)) for t in list_tokens(session, owner=owner)]
    context = {"tokens": tokens, "created": None, "error": None, **extra}
    return render(request, "tokens.html", context, status_code=422 if extra.get("error") else 200)


@page_router.get("/tokens", response_class=HTMLResponse)
def tokens_page(request: Request, session: SessionDep, principal: SignedIn):
    return _tokens_page(request, session, principal)


@page_router.post("/tokens", response_class=HTMLResponse)
async def tokens_create(request: Request, session: SessionDep, principal: SignedIn):
    form = await form_fields(request)

    def write():
        try:
            expires = form.get("expires", "").strip()
            token, secret = create_token(
                session,
                name=form.get("name", "").strip(),
                scope=form.get("scope", "read"),
                expires_in=parse_duration(expires) if expires else None,
                owner=principal,
            )
        except AccountError as exc:
            return _tokens_page(request, session, principal, error=str(exc))
        session.commit()
        return _tokens_page(request, session, principal, created=(token.name, secret))

    return await runtime_of(request).writes.run(write)


@page_router.post("/tokens/{token_id}/revoke")
async def tokens_revoke(
    request: Request,
    token_id: int,
    session: SessionDep,
    principal: SignedIn,
):
    def write() -> None:
        revoke_token(session, token_id=token_id, actor=principal)
        session.commit()

    await runtime_of(request).writes.run(write)
    return see_other(request, "/tokens")


def _admin_page(
    request: Request, session, error: str | None = None, new_password: tuple | None = None
):
    context = {
        "users": list_users(session),
        "roles": ROLES,
        "events": recent_audit(session),
        "error": error,
        "new_password": new_password,  # (name, password): a generated one, shown this once
    }
    return render(request, "admin.html", context, status_code=422 if error else 200)


@page_router.get("/admin", response_class=HTMLResponse)
def admin_page(request: Request, session: SessionDep, _: Admin):
    return _admin_page(request, session)


@page_router.post("/admin/users", response_class=HTMLResponse)
async def admin_add_user(request: Request, session: SessionDep, principal: Admin):
    form = await form_fields(request)
    return await _admin_action(
        request,
        session,
        lambda: add_user(  # hashes the password with argon2, in the write's thread
            session,
            name=form.get("name", "").strip(),
            role=form.get("role", ""),
            password=form.get("password", ""),
            actor=principal,
        ),
    )


@page_router.post("/admin/users/{name}/role", response_class=HTMLResponse)
async def admin_set_role(
    name: str,
    request: Request,
    session: SessionDep,
    principal: Admin,
):
    role = (await form_fields(request)).get("role", "")
    return await _admin_action(
        request, session, lambda: set_role(session, name=name, role=role, actor=principal)
    )


async def _admin_action(request: Request, session, action: Callable[[], object]):
    """Run one admin change in the write queue: back to the admin page with the refusal's
    sentence, or committed and redirected to it."""

    def write():
        try:
            action()
        except AccountError as exc:
            return _admin_page(request, session, str(exc))
        session.commit()
        return see_other(request, "/admin")

    return await runtime_of(request).writes.run(write)


@page_router.post("/admin/users/{name}/disable", response_class=HTMLResponse)
async def admin_disable_user(name: str, request: Request, session: SessionDep, principal: Admin):
    return await _admin_action(
        request, session, lambda: disable_user(session, name=name, actor=principal)
    )


@page_router.post("/admin/users/{name}/enable", response_class=HTMLResponse)
async def admin_enable_user(name: str, request: Request, session: SessionDep, principal: Admin):
    return await _admin_action(
        request, session, lambda: enable_user(session, name=name, actor=principal)
    )


@page_router.post("/admin/users/{name}/password", response_class=HTMLResponse)
async def admin_reset_password(name: str, request: Request, session: SessionDep, principal: Admin):
    """Set the password given, or generate one and show it once."""
    given = (await form_fields(request)).get("password", "")

    def write():
        try:
            password = reset_password(session, name=name, password=given or None, actor=principal)
        except AccountError as exc:
            return _admin_page(request, session, str(exc))
        session.commit()
        return _admin_page(request, session, new_password=(name, None if given else password))

    return await runtime_of(request).writes.run(write)
