"""Who is asking and what they may do: principals and roles, the account errors, the audit log."""

from dataclasses import dataclass
from typing import Literal

from sqlmodel import Session, col, select

from app.errors import PitfallsError
from app.models import AuditEvent

ROLE_RANK = {"": -1, "reader": 0, "editor": 1, "admin": 2}
SCOPE_ROLE = {"read": "reader", "write": "editor"}


class AccountError(PitfallsError, ValueError):
    """A request about accounts or tokens that cannot be done; the message says why."""

    status = 422


class AccountDisabled(Exception):
    """The account (a person's, or the owner of a token) is disabled: nothing it holds works."""

    def __init__(self, name: str, *, token: str | None = None) -> None:
        whose = f"The account {name!r} that owns this token" if token else f"The account {name!r}"
        super().__init__(
            f"{whose} is disabled, so its logins and API tokens do not work; "
            "an admin can enable it again on /admin."
        )
        self.name = name


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
