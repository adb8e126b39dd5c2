"""One settings object, read from PITFALLS_* environment variables and a `.env` file.

The rules every value is checked by live in app/quick_settings.py, which also reads the same
settings without pydantic for the CLI's short commands.

Every setting has a default that makes `pitfalls serve` work on a fresh clone; a bad value stops
the start with a message that says which variable to fix and how.
"""

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import quick_settings as rules
from app.quick_settings import (  # noqa: F401 (named here too)
    ROLE_NAMES,
    SUPPORTED_DATABASE_SCHEMES,
    QuickSettings,
    parse_role_map,
)


class SettingsError(Exception):
    """A setting has a value the app cannot start with; the message says what to do."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PITFALLS_", env_file=".env", extra="ignore", validate_default=True
    )

    data_dir: Path = Field(
        Path("data"), description="Folder for the SQLite database and the search index."
    )
    database_url: str = Field(
        "",
        description="SQLAlchemy URL of the database; empty means a SQLite file in the data dir.",
    )
    index_dir: Path | None = Field(
        None,
        description="Folder of the search index; empty means <data dir>/index.",
    )
    search_engine: Literal["whoosh", "tantivy"] = Field(
        "whoosh",
        description="The search engine behind the index: whoosh, or tantivy (faster, needs "
        '`pip install "pitfalls[tantivy]"`); switching rebuilds the index at the next start.',
    )
    content_dir: Path | None = Field(
        None,
        description="Folder of the Markdown entries; empty means ./content, or the entries "
        "shipped with the package when there is no ./content.",
    )
    first_start_snapshots: str = Field(
        "",
        description="Folder where `pitfalls serve` keeps what a first start made of the entries "
        "(database and index), so that the next fresh SQLite data dir with the same entries "
        "and code starts in seconds; empty means $XDG_CACHE_HOME/pitfalls/first-start "
        "(~/.cache/…), off means never (not even the one `pitfalls snapshot` made for the "
        "installation, which is looked in after this folder).",
    )
    sqlite_busy_timeout_ms: int = Field(
        5000,
        ge=0,
        description="How long a SQLite writer waits for a lock before failing.",
    )
    write_queue_wait_ms: int = Field(
        30_000,
        ge=100,
        le=600_000,
        description="How long a save waits for its turn among this process's writes (one at a "
        "time on SQLite) before it is answered 503 with nothing saved.",
    )
    db_pool_size: int = Field(
        20,
        ge=1,
        le=500,
        description="Database connections each process keeps open; as many again may be opened "
        "for a burst (PostgreSQL: keep replicas x 2 x this under the server's max_connections).",
    )
    db_pool_timeout_s: float = Field(
        10,
        gt=0,
        le=600,
        description="How long a request waits for a free database connection before it is "
        "answered 503.",
    )
    setup_lock_timeout_s: float = Field(
        300,
        gt=0,
        le=86400,
        description="How long a starting process waits for another one that is migrating the "
        "schema or ingesting content on the same database.",
    )
    index_check_interval_ms: int = Field(
        1000,
        ge=0,
        description="How often a process compares the index with the database change sequence.",
    )
    search_page_size: int = Field(20, ge=1, le=200, description="Results per search page.")
    max_paste_bytes: int = Field(
        1_000_000, ge=1000, description="Largest traceback accepted by /match and the API."
    )
    match_budget_ms: int = Field(
        2000,
        ge=50,
        le=600_000,
        description="Most time one paste may take to parse and match; past it the answer is 503.",
    )
    search_budget_ms: int = Field(
        1000,
        ge=50,
        le=600_000,
        description="Most time one search may take; past it the answer is 503.",
    )

    root_path: str = Field(
        "",
        description="The path the app is served under behind a proxy (e.g. /kb), or empty.",
    )
    public_url: str = Field(
        "",
        description="The address people reach the site at (https://kb.example.org/kb): the "
        "Atom feed and OpenSearch ids are built from it; empty means the request's own.",
    )
    forwarded_allow_ips: str = Field(
        "",
        description="Addresses whose X-Forwarded-For/-Proto headers are trusted (a reverse "
        "proxy's), comma-separated, or * for any; empty trusts none (a client could otherwise "
        "name any address and dodge the per-address limits).",
    )
    inbox: bool = Field(
        False,
        description="Keep the errors nothing matched (type, redacted message, fingerprint; "
        "never the paste) for editors at /inbox.",
    )
    inbox_per_client_per_hour: int = Field(
        30,
        ge=1,
        le=100_000,
        description="Unmatched errors one client (a login or token by name, else an address) "
        "may add to the inbox in an hour; past it, its pastes are answered and not counted.",
    )
    inbox_max_clusters: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="Error clusters the inbox keeps; a new error takes the place of the one "
        "seen least recently.",
    )
    webhook_worker: bool = Field(
        True,
        description="Deliver queued webhook events from a thread of the server process; turn "
        "it off where `pitfalls webhooks deliver` runs from cron instead.",
    )
    webhook_poll_interval_ms: int = Field(
        1000,
        ge=50,
        le=600_000,
        description="How often the server's webhook worker looks for deliveries that are due "
        "(a change made by the same process wakes it sooner).",
    )
    webhook_timeout_ms: int = Field(
        5000,
        ge=100,
        le=60_000,
        description="Most time one webhook delivery may take: connecting, sending, and reading "
        "the answer; past it the attempt fails and is retried.",
    )
    webhook_max_attempts: int = Field(
        8,
        ge=1,
        le=50,
        description="Attempts at one webhook delivery before it is marked failed.",
    )
    webhook_retry_base_ms: int = Field(
        10_000,
        ge=10,
        le=3_600_000,
        description="Wait before the second attempt of a failed webhook delivery; each later "
        "wait doubles, up to PITFALLS_WEBHOOK_RETRY_MAX_MS, with random jitter.",
    )
    webhook_retry_max_ms: int = Field(
        3_600_000,
        ge=10,
        le=86_400_000,
        description="The longest wait between two attempts at a webhook delivery.",
    )
    webhook_max_queue_rows: int = Field(
        10_000,
        ge=10,
        le=10_000_000,
        description="Webhook deliveries kept (queued and logged); past it the oldest finished "
        "ones are dropped, and with none to drop a new event is skipped with a log line.",
    )
    answer_token_days: int = Field(
        7,
        ge=1,
        le=365,
        description="How long an answer's token lets an outcome report on it count.",
    )
    reports_per_hour: int = Field(
        60,
        ge=1,
        le=100_000,
        description="Outcome reports one login or token may make in an hour.",
    )
    anonymous_reports_per_hour: int = Field(
        20,
        ge=1,
        le=100_000,
        description="Outcome reports one address may make in an hour without a login or token.",
    )
    log_level: str = Field("info", description="debug, info, warning or error.")
    log_format: str = Field("text", description="text, or json for one JSON object per line.")
    public_read: bool = Field(
        True,
        description="Anyone may read and search; when false, reading needs a login or a token.",
    )
    secret_key: str = Field(
        "",
        description="Key that signs session cookies; empty means a random key kept in "
        "<data dir>/secret_key (shared by every process on that data dir).",
    )
    secure_cookies: bool = Field(
        False, description="Send the session cookie over HTTPS only (set it behind HTTPS)."
    )
    session_days: int = Field(14, ge=1, le=365, description="How long a login lasts.")
    local_passwords: bool = Field(
        True,
        description="People may log in with a name and password; when false, the login page "
        "offers only the OpenID Connect sign-in and a password login is refused.",
    )
    oidc_discovery_url: str = Field(
        "",
        description="OpenID Connect: the provider's discovery document "
        "(https://id.example.org/.well-known/openid-configuration); empty turns the sign-in off.",
    )
    oidc_provider_name: str = Field(
        "single sign-on",
        description='What the login page calls the provider: "Sign in with <name>".',
    )
    oidc_client_id: str = Field("", description="OpenID Connect: this site's client id.")
    oidc_client_secret: str = Field(
        "", description="OpenID Connect: this site's client secret (empty for a public client)."
    )
    oidc_scopes: str = Field(
        "openid profile email",
        description="OpenID Connect: the scopes asked for, space-separated (openid is added).",
    )
    oidc_groups_claim: str = Field(
        "groups",
        description="OpenID Connect: the claim of the ID token (or userinfo) that lists the "
        "user's groups.",
    )
    oidc_role_map: str = Field(
        "",
        description="OpenID Connect: which groups give which role, as group=role pairs "
        "separated by commas (pitfalls-admins=admin,ml-team=editor); the highest one applies.",
    )
    oidc_default_role: Literal["reader", "editor", "admin"] = Field(
        "reader",
        description="OpenID Connect: the role of a user none of whose groups is mapped.",
    )
    oidc_provider_logout: bool = Field(
        False,
        description="OpenID Connect: logging out here also ends the provider's session, where "
        "it has an end_session_endpoint (register <public URL>/ as a post-logout redirect URI).",
    )
    oidc_timeout_s: float = Field(
        10,
        gt=0,
        le=120,
        description="OpenID Connect: how long one request to the provider may take.",
    )

    @field_validator("index_dir", "content_dir", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        # `PITFALLS_INDEX_DIR=` (set, empty) means the default, as documented, not Path(".").
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("secret_key")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        return rules.clean_secret_key(value)

    @field_validator("root_path")
    @classmethod
    def _root_path(cls, value: str) -> str:
        return rules.clean_root_path(value)

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        return rules.clean_public_url(value)

    @field_validator("oidc_discovery_url")
    @classmethod
    def _discovery_url(cls, value: str) -> str:
        return rules.clean_discovery_url(value)

    @field_validator("oidc_role_map")
    @classmethod
    def _role_map(cls, value: str) -> str:
        return rules.clean_role_map(value)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        return rules.clean_log_level(value)

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        return rules.clean_log_format(value)

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        return rules.clean_database_url(value)

    @model_validator(mode="after")
    def _fill_defaults(self) -> "Settings":
        rules.fill_defaults(self)
        return self

    @property
    def snapshot_dir(self) -> Path | None:
        """Where first-start snapshots live; None when they are off."""
        value = self.first_start_snapshots.strip()
        if value.lower() == "off":
            return None
        if value:
            return Path(value)
        cache = os.environ.get("XDG_CACHE_HOME", "").strip()
        try:
            root = Path(cache) if cache else Path.home() / ".cache"
        except RuntimeError:  # no home folder to be found: no snapshots
            return None
        return root / "pitfalls" / "first-start"

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_discovery_url)

    @property
    def oidc_roles(self) -> dict[str, str]:
        """The group→role mapping of PITFALLS_OIDC_ROLE_MAP."""
        return parse_role_map(self.oidc_role_map)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def full_settings(settings: QuickSettings | Settings) -> Settings:
    """`settings` as `Settings`: quick ones are read again, with pydantic, from the same sources."""
    return settings if isinstance(settings, Settings) else load_settings()


def load_settings(**overrides: Any) -> Settings:
    """Read the settings; raise SettingsError naming the variable and the fix on a bad value."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "settings"
            variable = f"PITFALLS_{field.upper()}" if error["loc"] else "settings"
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{variable}: {message}")
        raise SettingsError("cannot start: " + "; ".join(lines)) from None
