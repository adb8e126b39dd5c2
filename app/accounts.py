"""Accounts, API tokens, login sessions and throttling, and the audit log: who may do what.

Everything here works on a `Session` and leaves the commit to the caller, so a write and its audit
record land in one transaction. `authenticate` is the exception: it commits the count of an attempt
before it checks the password, so that every process sees the count at once. The web layer and the
CLI both call these functions.
"""

import functools
import hashlib
import math
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Engine, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, delete, func, select

from app.models import (
    ROLES,
    TOKEN_SCOPES,
    ApiToken,
    AuditEvent,
    LoginSession,
    LoginThrottle,
    User,
    utcnow,
)

ROLE_RANK = {"": -1, "reader": 0, "editor": 1, "admin": 2}
SCOPE_ROLE = {"read": "reader", "write": "editor"}
TOKEN_PREFIX = "pft_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MIN_PASSWORD_LENGTH = 8
# Login throttling. Per (name, address) pair: a few free attempts, then waits that double, so a
# guesser elsewhere never locks the real user out. Per address, over all names: a cap per window.
PAIR_FREE_ATTEMPTS = 5
PAIR_FIRST_WAIT = timedelta(seconds=30)
PAIR_LONGEST_WAIT = timedelta(hours=1)
PAIR_MEMORY = timedelta(days=1)  # a pair's count is forgotten a day after its last attempt
ADDRESS_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_ADDRESS = 20
LAST_USE_GRANULARITY = timedelta(minutes=1)  # a token's last use is not rewritten every request

_hasher = PasswordHasher()


# Verified when the name is unknown, so a wrong name costs as long as a wrong password.
@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against when the name is unknown, so that the answer takes as long.
    Made on first use: an argon2 hash costs ~0.2 s, which every start-up paid before."""
    return _hasher.hash(secrets.token_urlsafe(16))


class AccountError(ValueError):
    """A request about accounts or tokens that cannot be done; the message says why."""


class AccountDisabled(Exception):
    """The account (a person's, or the owner of a token) is disabled: nothing it holds works."""

    def __init__(self, name: str, *, token: str | None = None) -> None:
        whose = f"The account {name!r} that owns this token" if token else f"The account {name!r}"
        super().__init__(
            f"{whose} is disabled, so its logins and API tokens do not work; "
            "an admin can enable it again on /admin."
        )
        self.name = name


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
    scope: str = ""  # a token's scope (read or write); its role may be lower (its owner's)

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


def set_password(
    session: Session,
    *,
    name: str,
    password: str,
    actor: Principal,
    action: str = "user.password",
    detail: str = "",
) -> User:
    user = _existing_user(session, name)
    user.password_hash = _hash_password(password)
    session.add(user)
    # Whoever knew the old password may be logged in with it: every session of the user ends.
    session.exec(delete(LoginSession).where(col(LoginSession.user_id) == user.id))
    audit(session, actor, action, name, detail)
    return user


def _admin_count(session: Session) -> int:
    """Admins who can log in: a disabled admin manages nothing."""
    query = (
        select(func.count())
        .select_from(User)
        .where(User.role == "admin", col(User.disabled_at).is_(None))
    )
    return session.exec(query).one()


def admin_names(session: Session, *, limit: int = 3) -> list[str]:
    """Some admins who can log in, to name in a refusal: who can grant a role."""
    query = (
        select(User.name)
        .where(User.role == "admin", col(User.disabled_at).is_(None))
        .order_by(col(User.name))
        .limit(limit)
    )
    return list(session.exec(query).all())


def _refuse_last_admin(session: Session, user: User, what: str) -> None:
    if user.role == "admin" and user.disabled_at is None and _admin_count(session) <= 1:
        raise AccountError(
            f"{user.name!r} is the last admin; make another user admin before {what}"
        )


def disable_user(session: Session, *, name: str, actor: Principal) -> User:
    """Disable an account: its sessions end now, and its logins and tokens are refused (each
    request checks) until it is enabled again. Nobody disables themselves or the last admin."""
    user = _existing_user(session, name)
    if actor.kind == "user" and actor.name == name:
        raise AccountError("you cannot disable your own account; another admin can")
    _refuse_last_admin(session, user, "disabling it")
    if user.disabled_at is None:
        user.disabled_at = utcnow()
        session.add(user)
        session.exec(delete(LoginSession).where(col(LoginSession.user_id) == user.id))
        audit(session, actor, "user.disable", name)
    return user


def enable_user(session: Session, *, name: str, actor: Principal) -> User:
    """Enable an account again: its password and its unrevoked tokens work again."""
    user = _existing_user(session, name)
    if user.disabled_at is not None:
        user.disabled_at = None
        session.add(user)
        audit(session, actor, "user.enable", name)
    return user


GENERATED_PASSWORD_BYTES = 12  # 16 characters of URL-safe base64


def reset_password(session: Session, *, name: str, password: str | None, actor: Principal) -> str:
    """An admin sets another user's password, or has one generated (returned, shown once);
    every session of that user ends."""
    new = password or secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
    detail = "given by the admin" if password else "generated"
    set_password(
        session, name=name, password=new, actor=actor, action="user.password.reset", detail=detail
    )
    return new


def change_own_password(engine: Engine, *, name: str, current: str, new: str, address: str) -> User:
    """A user changes their own password, proving the current one (throttled like a login);
    every session of theirs ends, so the caller starts a new one. Blocking: a worker thread."""
    if current == new:
        raise AccountError("the new password is the same as the current one")
    if authenticate(engine, name=name, password=current, address=address) is None:
        raise AccountError("the current password is wrong; nothing was changed")
    with Session(engine, expire_on_commit=False) as session:
        user = set_password(
            session,
            name=name,
            password=new,
            actor=Principal("user", name),
            action="user.password.change",
        )
        session.commit()
        return user


# ---- logging in: throttling shared by every process -----------------------------------------


def pair_wait(attempts: int) -> timedelta:
    """How long a (name, address) pair waits after `attempts` counted attempts."""
    if attempts < PAIR_FREE_ATTEMPTS:
        return timedelta(0)
    doublings = min(attempts - PAIR_FREE_ATTEMPTS, 20)
    return min(PAIR_FIRST_WAIT * 2**doublings, PAIR_LONGEST_WAIT)


def _insert_if_missing(session: Session, row: dict) -> None:
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.exec(insert(LoginThrottle).values(**row).on_conflict_do_nothing())


def _throttle_key(kind: str, name: str, address: str):
    return (
        col(LoginThrottle.kind) == kind,
        col(LoginThrottle.name) == name,
        col(LoginThrottle.address) == address,
    )


def _next_count(kind: str, failures: int, first_at: datetime, last_at: datetime, now: datetime):
    """(seconds to wait, or 0 and the row's new failures and first_at) for one more attempt."""
    if kind == "pair":
        if last_at <= now - PAIR_MEMORY:
            failures = 0
        # Only a due wait counts: another worker's clock may have stamped `last_at` a moment
        # after our `now`, which must not turn a free attempt into a refusal.
        delay = pair_wait(failures)
        wait = last_at + delay - now if delay else timedelta(0)
        return wait.total_seconds(), failures + 1, first_at if failures else now
    if first_at <= now - ADDRESS_WINDOW:  # a new window
        return 0.0, 1, now
    if failures >= MAX_FAILURES_PER_ADDRESS:
        return (first_at + ADDRESS_WINDOW - now).total_seconds(), failures, first_at
    return 0.0, failures + 1, first_at


def _count_attempt(engine: Engine, name: str, address: str, now: datetime) -> None:
    """Count one attempt for the pair and the address, or raise TooManyAttempts.

    Compare-and-set: each row is updated only if it still holds what was read, so two processes
    that read the same count cannot both take the last free attempt; the loser reads again. The
    count is committed before the password is checked (and given back on success).
    """
    keys = [("pair", name, address), ("address", "", address)]
    with Session(engine) as session:
        for _ in range(50):
            for kind, key_name, key_address in keys:
                # On SQLite this first write also takes the database's write lock, so the rest of
                # the transaction runs alone; on PostgreSQL the compare-and-set below does the work.
                row = {"kind": kind, "name": key_name, "address": key_address}
                _insert_if_missing(session, {**row, "failures": 0, "first_at": now, "last_at": now})
            plans = []
            for kind, key_name, key_address in keys:
                current = session.exec(
                    select(
                        LoginThrottle.failures, LoginThrottle.first_at, LoginThrottle.last_at
                    ).where(*_throttle_key(kind, key_name, key_address))
                ).one()
                wait, failures, first_at = _next_count(kind, *current, now)
                if wait > 0:
                    session.rollback()
                    raise TooManyAttempts(max(1, math.ceil(wait)))
                plans.append((kind, key_name, key_address, current, failures, first_at))
            swapped = all(
                session.exec(
                    update(LoginThrottle)
                    .where(
                        *_throttle_key(kind, key_name, key_address),
                        col(LoginThrottle.failures) == old[0],
                        col(LoginThrottle.last_at) == old[2],
                    )
                    .values(failures=failures, first_at=first_at, last_at=now)
                ).rowcount
                == 1
                for kind, key_name, key_address, old, failures, first_at in plans
            )
            if swapped:
                session.commit()
                return
            session.rollback()  # another process counted first: read again
    raise TooManyAttempts(1)


def authenticate(
    engine: Engine, *, name: str, password: str, address: str, now: datetime | None = None
) -> User | None:
    """The user whose name and password these are, or None; TooManyAttempts when throttled,
    AccountDisabled when the password is right but the account is disabled.

    Blocking (argon2 takes tens of milliseconds, and it commits): call it from a worker thread.
    The attempt is counted first, for the (name, address) pair and for the address, in its own
    committed transaction; a success gives both back (the pair's count is cleared).
    """
    now = now or utcnow()
    name = name.replace("\x00", "\ufffd")  # no database stores a NUL; no user has one
    name_key, address = name[:100], address[:100]
    _count_attempt(engine, name_key, address, now)
    with Session(engine, expire_on_commit=False) as session:
        user = get_user(session, name)
        try:
            _hasher.verify(user.password_hash if user else _dummy_hash(), password)
            verified = user is not None
        except (VerificationError, InvalidHashError):
            verified = False
        if not verified or user is None:
            session.exec(
                delete(LoginThrottle).where(col(LoginThrottle.last_at) < now - PAIR_MEMORY)
            )
            audit(session, ANONYMOUS, "login.failed", name[:200], f"from {address}")
            session.commit()
            return None
        if user.disabled_at is not None:  # said only to whoever knows the password
            session.commit()
            raise AccountDisabled(user.name)
        if _hasher.check_needs_rehash(user.password_hash):
            user.password_hash = _hasher.hash(password)
        user.last_login_at = now
        session.add(user)
        session.exec(delete(LoginThrottle).where(*_throttle_key("pair", name_key, address)))
        session.exec(
            update(LoginThrottle)
            .where(*_throttle_key("address", "", address), col(LoginThrottle.failures) > 0)
            .values(failures=LoginThrottle.failures - 1)
        )
        session.commit()
        return user


# ---- login sessions ---------------------------------------------------------------------------


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def start_login_session(session: Session, user: User, *, lifetime: timedelta) -> str:
    """A new session for `user`; returns the key for its cookie (only the key's hash is kept)."""
    assert user.id is not None  # a stored user: a session refers to its row
    now = utcnow()
    session.exec(delete(LoginSession).where(col(LoginSession.expires_at) <= now))
    key = secrets.token_urlsafe(32)
    session.add(
        LoginSession(
            key_hash=_key_hash(key), user_id=user.id, created_at=now, expires_at=now + lifetime
        )
    )
    return key


def login_session_user(session: Session, key: str) -> User | None:
    """The user of a live session, or None when the key is unknown, ended or expired."""
    query = (
        select(User)
        .join(LoginSession, col(LoginSession.user_id) == col(User.id))
        .where(
            LoginSession.key_hash == _key_hash(key),
            col(LoginSession.expires_at) > utcnow(),
            col(User.disabled_at).is_(None),  # checked on every request, not only at login
        )
    )
    return session.exec(query).first()


def end_login_session(session: Session, key: str) -> None:
    session.exec(delete(LoginSession).where(col(LoginSession.key_hash) == _key_hash(key)))


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
