"""Logging in: the throttling every process shares, the password check, and login sessions.

`authenticate` commits: it counts the attempt before it checks the password, so that every
process sees the count at once.
"""

import hashlib
import math
import secrets
from datetime import datetime, timedelta

from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Engine, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, delete, select

from app.accounts import passwords
from app.accounts.principals import ANONYMOUS, AccountDisabled, AccountError, Principal, audit
from app.accounts.users import get_user, set_password
from app.models import LoginSession, LoginThrottle, User, utcnow

# Login throttling. Per (name, address) pair: a few free attempts, then waits that double, so a
# guesser elsewhere never locks the real user out. Per address, over all names: a cap per window.
PAIR_FREE_ATTEMPTS = 5
PAIR_FIRST_WAIT = timedelta(seconds=30)
PAIR_LONGEST_WAIT = timedelta(hours=1)
PAIR_MEMORY = timedelta(days=1)  # a pair's count is forgotten a day after its last attempt
ADDRESS_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_ADDRESS = 20


class TooManyAttempts(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed logins; try again in {retry_after} seconds")
        self.retry_after = retry_after


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
            passwords._hasher.verify(
                user.password_hash if user else passwords._dummy_hash(), password
            )
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
        if passwords._hasher.check_needs_rehash(user.password_hash):
            user.password_hash = passwords._hasher.hash(password)
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
