"""Accounts over the API: who am I, users, the audit log, passwords, tokens."""

from datetime import datetime

from fastapi import HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from app.accounts import (
    TooManyAttempts,
    change_own_password,
    disable_user,
    enable_user,
    get_user,
    list_tokens,
    list_users,
    recent_audit,
    reset_password,
    token_state,
)
from app.catalog import NotFound
from app.models import ApiToken, User, UtcTimestamp
from app.web import routers
from app.web.accounts import oidc
from app.web.auth import Admin, SignedIn, get_principal, log_in
from app.web.deps import SessionDep
from app.web.http import errors, read_json
from app.web.runtime import runtime_of

api_router = routers.api_router("accounts")


class WhoAmI(BaseModel):
    authenticated: bool
    kind: str
    name: str
    role: str


@api_router.get("/me", summary="Who the request is authenticated as")
def whoami(request: Request) -> WhoAmI:
    principal = get_principal(request)
    return WhoAmI(
        authenticated=principal.authenticated,
        kind=principal.kind,
        name=principal.label if principal.authenticated else "",
        role=principal.role,
    )


class UserOut(BaseModel):
    name: str
    role: str
    created_at: UtcTimestamp
    last_login_at: UtcTimestamp | None
    disabled: bool
    disabled_at: UtcTimestamp | None

    @classmethod
    def of(cls, user: User) -> "UserOut":
        return cls(
            name=user.name,
            role=user.role,
            created_at=user.created_at,
            last_login_at=user.last_login_at,
            disabled=user.disabled_at is not None,
            disabled_at=user.disabled_at,
        )


class AuditOut(BaseModel):
    at: UtcTimestamp
    actor: str
    action: str
    target: str
    detail: str


class TokenOut(BaseModel):
    id: int
    name: str
    scope: str
    owner: str | None
    prefix: str = Field(description="The token's first characters, to tell it apart.")
    created_at: UtcTimestamp
    expires_at: UtcTimestamp | None
    last_used_at: UtcTimestamp | None
    state: str = Field(description="active, expired or revoked")

    @classmethod
    def of(cls, token: ApiToken, now: datetime | None = None) -> "TokenOut":
        return cls(
            id=token.id or 0,
            name=token.name,
            scope=token.scope,
            owner=token.owner,
            prefix=token.prefix,
            created_at=token.created_at,
            expires_at=token.expires_at,
            last_used_at=token.last_used_at,
            state=token_state(token, now),
        )


class PasswordReset(BaseModel):
    password: str | None = Field(
        None, description="The new password; leave it out to have one generated."
    )


class PasswordResetOut(BaseModel):
    name: str
    password: str | None = Field(
        description="The generated password, shown this once; null when one was given."
    )


class PasswordChange(BaseModel):
    current_password: str
    new_password: str


def _known(session, name: str) -> None:
    if get_user(session, name) is None:
        raise NotFound(f"There is no user named {name!r}; GET /api/v1/users lists them.")


@api_router.get("/users", summary="Every user, with role and state (admins)", responses=errors(403))
def users(session: SessionDep, _: Admin) -> list[UserOut]:
    return [UserOut.of(u) for u in list_users(session)]


@api_router.get(
    "/audit", summary="The audit log, newest first (admins)", responses=errors(403, 422)
)
def audit_log(
    session: SessionDep, _: Admin, limit: int = Query(100, ge=1, le=1000)
) -> list[AuditOut]:
    return [
        AuditOut.model_validate(e, from_attributes=True) for e in recent_audit(session, limit=limit)
    ]


@api_router.post(
    "/users/{name}/disable",
    summary="Disable a user: their logins and tokens stop at once (admins)",
    description="Nobody disables their own account or the last admin (422).",
    responses=errors(403, 404, 422),
)
def disable(name: str, session: SessionDep, principal: Admin) -> UserOut:
    _known(session, name)
    user = disable_user(session, name=name, actor=principal)
    session.commit()
    return UserOut.of(user)


@api_router.post(
    "/users/{name}/enable",
    summary="Enable a disabled user again (admins)",
    responses=errors(403, 404, 422),
)
def enable(name: str, session: SessionDep, principal: Admin) -> UserOut:
    _known(session, name)
    user = enable_user(session, name=name, actor=principal)
    session.commit()
    return UserOut.of(user)


@api_router.post(
    "/users/{name}/password",
    summary="Reset a user's password: the one given, or a generated one shown once (admins)",
    responses=errors(400, 403, 404, 413, 422),
)
async def reset(
    name: str, request: Request, session: SessionDep, principal: Admin
) -> PasswordResetOut:
    await run_in_threadpool(_known, session, name)
    body = await read_json(request, PasswordReset)

    def write() -> str:
        password = reset_password(
            session, name=name, password=body.password or None, actor=principal
        )
        session.commit()
        return password

    password = await runtime_of(request).writes.run(write)
    return PasswordResetOut(name=name, password=None if body.password else password)


@api_router.post(
    "/me/password",
    status_code=204,
    summary="Change your own password (a browser session; needs the current one)",
    description="Every other session of yours ends; this one goes on under a new key.",
    responses=errors(400, 403, 413, 422, 429),
)
async def change_password(request: Request, principal: SignedIn) -> None:
    refusal = oidc.passwords_off(request)
    if refusal:
        raise HTTPException(403, refusal)
    body = await read_json(request, PasswordChange)
    address = request.client.host if request.client else "unknown"
    try:
        user = await runtime_of(request).writes.run(
            change_own_password,
            runtime_of(request).engine,
            name=principal.name,
            current=body.current_password,
            new=body.new_password,
            address=address,
        )
    except TooManyAttempts as exc:
        raise HTTPException(
            429, f"Too many wrong passwords: {exc}.", {"Retry-After": str(exc.retry_after)}
        ) from None
    await runtime_of(request).writes.run(log_in, request, user)


@api_router.get(
    "/tokens",
    summary="Your API tokens (an admin sees everyone's); never their secrets",
    responses=errors(403),
)
def tokens(session: SessionDep, principal: SignedIn) -> list[TokenOut]:
    owner = None if principal.has_role("admin") else principal.name
    return [TokenOut.of(t) for t in list_tokens(session, owner=owner)]
