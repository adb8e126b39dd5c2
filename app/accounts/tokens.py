"""API tokens: created (the secret shown once, its hash kept), listed, revoked, and read back
as a principal on each request."""

import hashlib
import re
import secrets
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from app.accounts.principals import (
    ROLE_RANK,
    SCOPE_ROLE,
    AccountDisabled,
    AccountError,
    Principal,
    audit,
)
from app.accounts.users import _check_name, get_user
from app.models import TOKEN_SCOPES, ApiToken, utcnow

TOKEN_PREFIX = "pft_"
LAST_USE_GRANULARITY = timedelta(minutes=1)  # a token's last use is not rewritten every request


# ---- API tokens -----------------------------------------------------------------------------


def parse_duration(text: str) -> timedelta:
    """`90d`, `12h`, `30m` or `2w` as a timedelta."""
    match = re.fullmatch(r"\s*(\d+)\s*([mhdw])\s*", text)
    if not match or int(match.group(1)) == 0:
        raise AccountError(f"invalid duration {text!r}: write a number and m, h, d or w (90d)")
    unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[match.group(2)]
    return timedelta(**{unit: int(match.group(1))})


def _token_hash(secret: str) -> str:
    # Tokens are 256 random bits: a fast hash is enough, and it lets a request find its row.
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    session: Session,
    *,
    name: str,
    scope: str,
    expires_in: timedelta | None,
    owner: Principal,
) -> tuple[ApiToken, str]:
    """A new token and its secret, which is shown once and never stored."""
    _check_name(name)
    if scope not in TOKEN_SCOPES:
        raise AccountError(f"unknown scope {scope!r}: use read or write")
    if not owner.has_role(SCOPE_ROLE[scope]):
        raise AccountError(f"a {owner.role or 'anonymous'} cannot create a {scope} token")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    token = ApiToken(
        name=name,
        scope=scope,
        token_hash=_token_hash(secret),
        prefix=secret[:10],
        owner=owner.name if owner.kind == "user" else None,
        created_at=now,
        expires_at=now + expires_in if expires_in else None,
    )
    session.add(token)
    expiry = f", expires {token.expires_at:%Y-%m-%d}" if token.expires_at else ""
    audit(session, owner, "token.create", name, f"scope {scope}{expiry}")
    return token, secret


def list_tokens(session: Session, *, owner: str | None = None) -> list[ApiToken]:
    query = select(ApiToken).order_by(col(ApiToken.created_at).desc(), col(ApiToken.id).desc())
    if owner is not None:
        query = query.where(ApiToken.owner == owner)
    return list(session.exec(query).all())


def revoke_token(session: Session, *, token_id: int, actor: Principal) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None or (not actor.has_role("admin") and token.owner != actor.name):
        raise AccountError(f"there is no token {token_id} of yours")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.add(token)
        audit(session, actor, "token.revoke", token.name, f"id {token.id}")
    return token


def token_state(token: ApiToken, now: datetime | None = None) -> str:
    now = now or utcnow()
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and _aware(token.expires_at) <= now:
        return "expired"
    return "active"


def _aware(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes; every time stored here is UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=utcnow().tzinfo)


def token_principal(session: Session, secret: str) -> Principal | None:
    """The principal of a presented token, or None when it is unknown, revoked or expired;
    AccountDisabled when its owner's account is disabled.

    Records the token's last use (at most once a minute); the caller commits.
    """
    token = session.exec(select(ApiToken).where(ApiToken.token_hash == _token_hash(secret))).first()
    now = utcnow()
    if token is None or token_state(token, now) != "active":
        return None
    role = SCOPE_ROLE[token.scope]
    if token.owner is not None:
        # A token never outranks its owner: a demoted or removed owner's tokens shrink with them.
        owner = get_user(session, token.owner)
        if owner is not None and owner.disabled_at is not None:
            raise AccountDisabled(owner.name, token=token.name)
        owner_role = owner.role if owner else ""
        role = min(role, owner_role, key=ROLE_RANK.__getitem__)
        if not role:
            return None
    if token.last_used_at is None or now - _aware(token.last_used_at) >= LAST_USE_GRANULARITY:
        token.last_used_at = now
        session.add(token)
    return Principal("token", token.name, role, token_id=token.id, scope=token.scope)
