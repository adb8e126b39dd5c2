"""Users: added, listed, their role and password set, disabled and enabled; never the last
admin removed."""

import re
import secrets

from sqlmodel import Session, col, delete, func, select

from app.accounts.passwords import _hash_password
from app.accounts.principals import AccountError, Principal, audit
from app.models import ROLES, LoginSession, User, utcnow

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


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


def role_from_groups(session: Session, *, name: str, actor: Principal) -> User:
    """Give `name`'s role back to its OpenID Connect groups (`set_role` took it from them):
    the next sign-in sets it. An account with no provider identity has no groups."""
    user = _existing_user(session, name)
    if user.oidc_subject is None:
        raise AccountError(f"{name!r} has never signed in with OpenID Connect: it has no groups")
    user.role_source = "provider"
    session.add(user)
    audit(session, actor, "user.role", name, "role from the groups from the next sign-in")
    return user


def set_role(session: Session, *, name: str, role: str, actor: Principal) -> User:
    user = _existing_user(session, name)
    _check_role(role)
    if user.role == "admin" and role != "admin" and _admin_count(session) == 1:
        raise AccountError(f"{name!r} is the last admin; make another user admin first")
    user.role = role
    # Set by hand: a provider's groups no longer change it at sign-in (`identities`).
    user.role_source = "admin"
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
