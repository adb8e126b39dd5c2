"""Database tables. The schema is created and changed only by the Alembic migrations."""

from datetime import UTC, datetime
from typing import Annotated

from pydantic import PlainSerializer, WithJsonSchema
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlmodel import Field, SQLModel

from app.column_limits import (
    ENTRY_ID_LENGTH,
    ENTRY_KINDS,
    ENTRY_VERSIONS_LENGTH,
    SIGNATURE_EXCEPTION_LENGTH,
)

__all__ = ["ENTRY_KINDS"]  # kept importable from here
ROLES = ("reader", "editor", "admin")
TOKEN_SCOPES = ("read", "write")
SNIPPET_ROLES = ("repro", "fix", "demo")


def utcnow() -> datetime:
    return datetime.now(UTC)


def utc_iso(moment: datetime) -> str:
    """How the API writes a moment: ISO 8601 in UTC with a `Z` (a naive time is taken as UTC)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


# A datetime field of an API model: written by `utc_iso` whatever zone (or none) the value has.
UtcTimestamp = Annotated[
    datetime,
    PlainSerializer(utc_iso, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time", "examples": ["2026-11-21T10:51:11Z"]}),
]


class UtcDateTime(TypeDecorator):
    """A moment, always handed back in UTC with its zone, whatever the database.

    SQLite keeps no zone and hands back naive datetimes; PostgreSQL hands back the session's zone.
    Every time stored here is UTC, so code, pages and the API's JSON (which pydantic writes with a
    `Z`) see one kind of value on both.
    """

    impl = DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _entry_fk() -> Column:
    return Column(
        String(100),
        ForeignKey("entry.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    )


class Entry(SQLModel, table=True):
    """The current state of one pitfall; its history is in `Revision`."""

    id: str = Field(primary_key=True, max_length=ENTRY_ID_LENGTH)
    title: str = Field(sa_type=Text)
    summary: str = Field(sa_type=Text)
    kind: str = Field(max_length=20, index=True)
    tags: list[str] = Field(default_factory=list, sa_type=JSON)
    aliases: list[str] = Field(default_factory=list, sa_type=JSON)
    # Questions the entry answers, in readers' words (searchable, English or Chinese).
    questions: list[str] = Field(
        default_factory=list, sa_column_kwargs={"server_default": "[]"}, sa_type=JSON
    )
    versions: str | None = Field(default=None, max_length=ENTRY_VERSIONS_LENGTH)
    related: list[str] = Field(default_factory=list, sa_type=JSON)
    sources: list[str] = Field(default_factory=list, sa_type=JSON)
    body_markdown: str = Field(sa_type=Text)
    body_html: str = Field(sa_type=Text)
    revision: int = Field(default=1, description="Number of the current revision.")
    content_hash: str = Field(max_length=64, description="sha256 of the current Markdown.")
    file_hash: str | None = Field(
        default=None,
        max_length=64,
        description="sha256 of the content file last ingested.",
    )
    archived: bool = Field(default=False, index=True)
    edited_since_ingest: bool = Field(
        default=False,
        description="Written in the wiki (edit, archive, restore) since the file was ingested.",
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class Signature(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(sa_column=_entry_fk())
    position: int
    exception: str | None = Field(default=None, max_length=SIGNATURE_EXCEPTION_LENGTH)
    message: str = Field(sa_type=Text)
    frame: str | None = Field(default=None, sa_type=Text)
    context: str | None = Field(default=None, sa_type=Text)
    example: str = Field(sa_type=Text)


class Snippet(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(sa_column=_entry_fk())
    position: int
    role: str = Field(max_length=10)
    options: dict[str, str] = Field(default_factory=dict, sa_type=JSON)
    code: str = Field(sa_type=Text)
    line: int = Field(description="Line of the opening fence in the entry's Markdown.")


class Revision(SQLModel, table=True):
    """Every change to an entry: the full Markdown text, who, where from, when and why."""

    __table_args__ = (UniqueConstraint("entry_id", "number"),)

    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(sa_column=_entry_fk())
    number: int
    markdown: str = Field(sa_type=Text)
    content_hash: str = Field(max_length=64)
    author: str = Field(max_length=200)
    source: str = Field(max_length=10)
    message: str = Field(default="", sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class Change(SQLModel, table=True):
    """The change feed: one row per write, in a monotonic sequence that derived caches follow.

    Not a foreign key on purpose: the record of a deletion outlives the entry.
    """

    seq: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    entry_id: str = Field(max_length=100, index=True)
    action: str = Field(max_length=10, description="create, update, archive, restore or delete.")
    revision: int | None = None
    actor: str = Field(default="", max_length=200, description="Who wrote it: a user or token.")
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class Verification(SQLModel, table=True):
    """One run of one snippet by `pitfalls verify`: what happened, where, and when."""

    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(sa_column=_entry_fk())
    snippet_position: int
    role: str = Field(max_length=10)
    code_hash: str = Field(max_length=64, description="sha256 of the snippet's code when it ran.")
    status: str = Field(max_length=10, description="passed, failed or skipped.")
    reason: str = Field(default="", sa_type=Text)
    duration_ms: int = 0
    torch_version: str | None = Field(default=None, max_length=50)
    python_version: str = Field(max_length=50)
    platform: str = Field(max_length=200)
    verified_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class User(SQLModel, table=True):
    """A person who logs in. `role` is reader, editor or admin; the password only as a hash."""

    __tablename__ = "account"  # "user" is a reserved word in PostgreSQL
    __table_args__ = (UniqueConstraint("oidc_issuer", "oidc_subject", name="uq_account_oidc"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, unique=True)
    role: str = Field(max_length=10)
    password_hash: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    last_login_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    # When an admin disabled the account (None: enabled); its sessions and tokens stop meanwhile.
    disabled_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    # Who set `role`: "admin" (by hand, or at creation) or "provider" (from the OpenID Connect
    # groups claim, which it then follows at each sign-in until an admin sets it by hand).
    role_source: str = Field(
        default="admin", max_length=10, sa_column_kwargs={"server_default": "admin"}
    )
    # The OpenID Connect identity this account signs in as: (issuer, subject), unique together.
    oidc_issuer: str | None = Field(default=None, max_length=500)
    oidc_subject: str | None = Field(default=None, max_length=255)


class ApiToken(SQLModel, table=True):
    """A bot's credential. Only the sha256 of the token is kept; it is shown once at creation."""

    __tablename__ = "api_token"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, index=True)
    scope: str = Field(max_length=10)
    token_hash: str = Field(max_length=64, unique=True)
    prefix: str = Field(max_length=20, description="The first characters, to tell tokens apart.")
    owner: str | None = Field(default=None, max_length=100, description="Who created it.")
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    expires_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    revoked_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    last_used_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class LoginSession(SQLModel, table=True):
    """One browser login. The cookie carries a random key and only its sha256 is kept here, so a
    copied cookie stops working as soon as the row goes: at logout, when the password changes,
    or when the session expires."""

    __tablename__ = "login_session"

    id: int | None = Field(default=None, primary_key=True)
    key_hash: str = Field(max_length=64, unique=True)
    user_id: int = Field(
        sa_column=Column(
            Integer, ForeignKey("account.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    expires_at: datetime = Field(sa_type=UtcDateTime, index=True)


class LoginThrottle(SQLModel, table=True):
    """Counted attempts, where every process sees them: logins, one row per (name, address)
    pair (`kind` "pair") and one per address over all names (`kind` "address", `name` empty);
    and errors added to the inbox, one row per client (`kind` "inbox", `name` the client,
    `failures` the count in the window that began at `first_at`)."""

    __tablename__ = "login_throttle"

    kind: str = Field(primary_key=True, max_length=10)
    name: str = Field(primary_key=True, max_length=100)
    address: str = Field(primary_key=True, max_length=100)
    failures: int = Field(default=0, description="Attempts counted and not yet forgotten.")
    first_at: datetime = Field(sa_type=UtcDateTime, description="When the count began.")
    last_at: datetime = Field(sa_type=UtcDateTime, index=True, description="The latest attempt.")


class AuditEvent(SQLModel, table=True):
    """Every write that is not an entry revision: accounts, roles, tokens, logins."""

    __tablename__ = "audit_event"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime, index=True)
    actor: str = Field(max_length=200)
    action: str = Field(max_length=50)
    target: str = Field(default="", max_length=200)
    detail: str = Field(default="", sa_type=Text)


class AppSecret(SQLModel, table=True):
    """A secret every process must share, kept where every replica reads it: the key that
    signs session cookies when PITFALLS_SECRET_KEY is not set."""

    __tablename__ = "app_secret"

    name: str = Field(primary_key=True, max_length=50)
    value: str = Field(sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class Outcome(SQLModel, table=True):
    """Whether an entry's fix worked for an error, reported once per voter (a user, a token or
    an anonymous address) and error: a second report from the same voter replaces the first."""

    __table_args__ = (UniqueConstraint("fingerprint", "entry_id", "voter"),)

    id: int | None = Field(default=None, primary_key=True)
    fingerprint: str = Field(max_length=16, index=True)
    entry_id: str = Field(sa_column=_entry_fk())
    worked: bool
    note: str = Field(default="", sa_type=Text)
    voter: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime, index=True)


class InboxCluster(SQLModel, table=True):
    """An error nothing matched, by fingerprint (only with PITFALLS_INBOX on): its type, its
    message normalized and redacted, how often and when it was seen. Never the raw paste."""

    __tablename__ = "inbox_cluster"

    fingerprint: str = Field(primary_key=True, max_length=16)
    exception: str = Field(max_length=200)
    message: str = Field(sa_type=Text)
    count: int = 0
    first_seen: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    last_seen: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime, index=True)


class InboxExample(SQLModel, table=True):
    """One distinct redacted message of an inbox cluster (a few are kept per cluster)."""

    __tablename__ = "inbox_example"
    __table_args__ = (UniqueConstraint("fingerprint", "message"),)

    id: int | None = Field(default=None, primary_key=True)
    fingerprint: str = Field(
        sa_column=Column(
            String(16),
            ForeignKey("inbox_cluster.fingerprint", ondelete="CASCADE"),
            nullable=False,
            index=True,
        )
    )
    message: str = Field(sa_type=Text)


WEBHOOK_EVENTS = (
    "entry.created",
    "entry.changed",
    "entry.archived",
    "inbox.cluster_new",
    "inbox.cluster_threshold",
)
WEBHOOK_FORMATS = ("json", "slack")
DELIVERY_STATES = ("pending", "delivering", "delivered", "failed")


class Webhook(SQLModel, table=True):
    """An address an admin registered to be told of events. `secret` signs each delivery; it is
    kept as given (a signature needs it) and never shown again after creation."""

    id: int | None = Field(default=None, primary_key=True)
    url: str = Field(sa_type=Text)
    events: list[str] = Field(default_factory=list, sa_type=JSON)
    body_format: str = Field(default="json", max_length=10)
    secret: str | None = Field(default=None, sa_type=Text)
    threshold: int = Field(default=10, description="Occurrences for inbox.cluster_threshold.")
    created_by: str = Field(default="", max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class WebhookDelivery(SQLModel, table=True):
    """One event to send to one webhook: the queue and the delivery log in one table.

    Written in the transaction of the change that caused it; a worker claims a due row with a
    conditional UPDATE (pending, or delivering with its lease run out), so each row is sent by
    one process at a time."""

    __tablename__ = "webhook_delivery"

    id: int | None = Field(default=None, primary_key=True)
    hook_id: int = Field(
        sa_column=Column(
            Integer, ForeignKey("webhook.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    event: str = Field(max_length=40)
    payload: dict = Field(default_factory=dict, sa_type=JSON)
    status: str = Field(default="pending", max_length=12, index=True)
    attempts: int = 0
    next_attempt_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime, index=True)
    lease_until: datetime | None = Field(default=None, sa_type=UtcDateTime)
    status_code: int | None = Field(default=None, description="The last answer's HTTP status.")
    error: str = Field(default="", sa_type=Text, description="Why the last attempt failed.")
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
