"""Accounts that sign in through an OpenID Connect provider: found by (issuer, subject), made on
the first sign-in, and given the role their groups map to.

A role has a source. The provider's groups set it when the account is made, and again at each
sign-in while it stays "provider"; once an admin sets the role by hand (`users.set_role`), the
source is "admin" and the groups no longer change it. Nothing here talks to the provider: the
web face verifies the ID token and hands over its claims as an `Identity`.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.accounts.principals import ROLE_RANK, AccountDisabled, Principal, audit
from app.accounts.users import _admin_count, get_user
from app.models import User, utcnow

NAME_LENGTH = 90  # leaves room for a "-2" suffix within the 100 characters of a name
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in: the verified claims this site uses."""

    issuer: str
    subject: str
    preferred_username: str = ""
    email: str = ""
    groups: tuple[str, ...] = ()


def groups_of(value: object) -> tuple[str, ...]:
    """The groups claim as a tuple of names: providers send a list, some a single string."""
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, Iterable):
        return tuple(str(group) for group in value if isinstance(group, str | int))
    return ()


def role_for_groups(groups: Iterable[str], role_map: Mapping[str, str], default_role: str) -> str:
    """The highest role any of the groups maps to; `default_role` when none is mapped."""
    roles = [role_map[group] for group in groups if group in role_map]
    return max(roles, key=ROLE_RANK.__getitem__) if roles else default_role


def _name_base(identity: Identity) -> str:
    for candidate in (identity.preferred_username, identity.email.partition("@")[0]):
        name = _NOT_IN_NAME.sub("-", candidate.strip()).lstrip("._-")[:NAME_LENGTH]
        if name:
            return name
    return "user"


def unique_name(session: Session, identity: Identity) -> str:
    """A free account name from preferred_username (else the email's local part): `ada`, then
    `ada-2`, `ada-3`, ... An existing account of that name is never taken over."""
    base = _name_base(identity)
    name, number = base, 1
    while get_user(session, name) is not None:
        number += 1
        name = f"{base}-{number}"
    return name


def identity_user(session: Session, issuer: str, subject: str) -> User | None:
    query = select(User).where(User.oidc_issuer == issuer, User.oidc_subject == subject)
    return session.exec(query).first()


def sign_in_identity(
    session: Session,
    identity: Identity,
    *,
    role_map: Mapping[str, str],
    default_role: str,
    now: datetime | None = None,
) -> User:
    """The account of `identity`, made on its first sign-in; its role follows the groups
    while the provider set it. AccountDisabled for a disabled account. The caller commits."""
    now = now or utcnow()
    role = role_for_groups(identity.groups, role_map, default_role)
    user = identity_user(session, identity.issuer, identity.subject)
    if user is None:
        name = unique_name(session, identity)
        user = User(
            name=name,
            role=role,
            role_source="provider",
            password_hash="",  # no password: an admin may set one where passwords are on
            oidc_issuer=identity.issuer,
            oidc_subject=identity.subject,
        )
        audit(
            session,
            Principal("user", name),
            "user.add",
            name,
            f"role {role} from the groups; first sign-in with {identity.issuer}",
        )
    elif user.disabled_at is not None:
        raise AccountDisabled(user.name)
    elif user.role_source == "provider" and user.role != role:
        if user.role == "admin" and _admin_count(session) <= 1:
            # Never the last admin removed, whoever asks: the groups wait for another admin.
            audit(
                session,
                Principal("user", user.name),
                "user.role.kept",
                user.name,
                f"the groups give {role}, but this is the last admin",
            )
        else:
            audit(
                session,
                Principal("user", user.name),
                "user.role",
                user.name,
                f"role {role} from the groups",
            )
            user.role = role
    user.last_login_at = now
    session.add(user)
    return user


SIGN_IN_TRIES = 3


def sign_in_identity_once_settled(
    engine: Engine,
    identity: Identity,
    *,
    role_map: Mapping[str, str],
    default_role: str,
    tries: int = SIGN_IN_TRIES,
) -> User:
    """`sign_in_identity` in a transaction of its own, committed. Two first sign-ins at once
    (two tabs, or two people whose names come out the same) both insert, and the database
    refuses the second by a unique key; tried again, it finds the account the first made, or
    the next free name. IntegrityError when every try collided."""
    for tries_left in reversed(range(tries)):
        with Session(engine, expire_on_commit=False) as session:
            try:
                user = sign_in_identity(
                    session, identity, role_map=role_map, default_role=default_role
                )
                session.commit()
                return user
            except IntegrityError:
                session.rollback()
                if not tries_left:
                    raise
    raise AssertionError("unreachable")
