"""Accounts, API tokens, login throttling and the audit log: who may do what, and who did.

Everything here works on a `Session` and leaves the commit to the caller, so a write and its audit
record land in one transaction. The web layer and the CLI both call these functions.
"""

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlmodel import Session, col, delete, func, select

from app.models import ROLES, TOKEN_SCOPES, ApiToken, AuditEvent, LoginFailure, User, utcnow

ROLE_RANK = {"": -1, "reader": 0, "editor": 1, "admin": 2}
SCOPE_ROLE = {"read": "reader", "write": "editor"}
TOKEN_PREFIX = "pft_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MIN_PASSWORD_LENGTH = 8
# Failed logins allowed per window: per account name, and per client address (many names).
LOGIN_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_NAME = 5
MAX_FAILURES_PER_ADDRESS = 20
LAST_USE_GRANULARITY = timedelta(minutes=1)  # a token's last use is not rewritten every request

_hasher = PasswordHasher()
# Verified when the name is unknown, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


class AccountError(ValueError):
    """A request about accounts or tokens that cannot be done; the message says why."""


class TooManyAttempts(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed logins; try again in {retry_after} seconds")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Principal:
    """Who is asking: a logged-in user, a bot's token, the command line, or nobody."""

    kind: Literal["anonymous", "user", "token", "cli", "ingest"]
    name: str = ""
    role: str = ""  # the effective role: reader, editor, admin, or "" for anonymous
    user_id: int | None = None
    token_id: int | None = None

    @property
    def label(self) -> str:
        """How the audit log and the history name this principal."""
        if self.kind == "token":
            return f"token:{self.name}"
        return self.name or self.kind

    @property
    def authenticated(self) -> bool:
        return self.kind != "anonymous"

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


ANONYMOUS = Principal("anonymous")
CLI = Principal("cli", "cli", "admin")
INGEST = Principal("ingest", "ingest", "admin")


def audit(session: Session, actor: Principal, action: str, target: str = "", detail: str = ""):
    session.add(AuditEvent(actor=actor.label, action=action, target=target, detail=detail))


def recent_audit(session: Session, *, limit: int = 100) -> list[AuditEvent]:
    query = select(AuditEvent).order_by(col(AuditEvent.id).desc()).limit(limit)
    return list(session.exec(query).all())


# ---- users ----------------------------------------------------------------------------------


def _check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise AccountError(
            f"invalid name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)"
        )
    return name


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise AccountError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    return role


def _hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password must have at least {MIN_PASSWORD_LENGTH} characters")
    return _hasher.hash(password)


def session_version(user: User) -> str:
    """Changes with the password, so that changing it ends the user's other sessions."""
    return hashlib.sha256(user.password_hash.encode()).hexdigest()[:16]


def get_user(session: Session, name: str) -> User | None:
    return session.exec(select(User).where(User.name == name)).first()


def list_users(session: Session) -> list[User]:
    return list(session.exec(select(User).order_by(col(User.name))).all())


def add_user(session: Session, *, name: str, role: str, password: str, actor: Principal) -> User:
    _check_name(name)
    _check_role(role)
    if get_user(session, name) is not None:
        raise AccountError(f"a user named {name!r} already exists")
    user = User(name=name, role=role, password_hash=_hash_password(password))
    session.add(user)
    audit(session, actor, "user.add", name, f"role {role}")
    return user


def _existing_user(session: Session, name: str) -> User:
    user = get_user(session, name)
    if user is None:
        raise AccountError(f"there is no user named {name!r}")
    return user


def set_role(session: Session, *, name: str, role: str, actor: Principal) -> User:
    user = _existing_user(session, name)
    _check_role(role)
    if user.role == "admin" and role != "admin" and _admin_count(session) == 1:
        raise AccountError(f"{name!r} is the last admin; make another user admin first")
    user.role = role
    session.add(user)
    audit(session, actor, "user.role", name, f"role {role}")
    return user


def set_password(session: Session, *, name: str, password: str, actor: Principal) -> User:
    user = _existing_user(session, name)
    user.password_hash = _hash_password(password)
    session.add(user)
    audit(session, actor, "user.password", name)
    return user


def _admin_count(session: Session) -> int:
    query = select(func.count()).select_from(User).where(User.role == "admin")
    return session.exec(query).one()


def _failures_since(session: Session, column, value: str, since: datetime) -> int:
    query = (
        select(func.count())
        .select_from(LoginFailure)
        .where(column == value, col(LoginFailure.at) >= since)
    )
    return session.exec(query).one()


def authenticate(session: Session, *, name: str, password: str, address: str) -> User | None:
    """The user whose name and password these are, or None; TooManyAttempts when throttled.

    A failure is recorded (the caller commits either way); a success clears the name's failures.
    """
    now = utcnow()
    since = now - LOGIN_WINDOW
    if (
        _failures_since(session, LoginFailure.name, name, since) >= MAX_FAILURES_PER_NAME
        or _failures_since(session, LoginFailure.address, address, since)
        >= MAX_FAILURES_PER_ADDRESS
    ):
        raise TooManyAttempts(int(LOGIN_WINDOW.total_seconds()))
    user = get_user(session, name)
    try:
        _hasher.verify(user.password_hash if user else _DUMMY_HASH, password)
        verified = user is not None
    except (VerificationError, InvalidHashError):
        verified = False
    if not verified or user is None:
        session.exec(delete(LoginFailure).where(col(LoginFailure.at) < now - timedelta(days=1)))
        session.add(LoginFailure(name=name[:100], address=address[:100], at=now))
        audit(session, ANONYMOUS, "login.failed", name[:200], f"from {address}")
        return None
    if _hasher.check_needs_rehash(user.password_hash):
        user.password_hash = _hasher.hash(password)
    user.last_login_at = now
    session.add(user)
    session.exec(delete(LoginFailure).where(LoginFailure.name == name))
    return user


def user_principal(user: User) -> Principal:
    return Principal("user", user.name, user.role, user_id=user.id)


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
    """The principal of a presented token, or None when it is unknown, revoked or expired.

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
        owner_role = owner.role if owner else ""
        role = min(role, owner_role, key=ROLE_RANK.__getitem__)
        if not role:
            return None
    if token.last_used_at is None or now - _aware(token.last_used_at) >= LAST_USE_GRANULARITY:
        token.last_used_at = now
        session.add(token)
    return Principal("token", token.name, role, token_id=token.id)
