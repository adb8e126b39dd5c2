"""The settings read without pydantic for the CLI's short commands, and the rules both share.

`pitfalls match`, `search`, `show` and `check` live for one command; pydantic-settings alone
costs them more than their answer. `quick_settings()` reads the same sources in the same order
(the process's PITFALLS_* variables, names in any case, over a `.env` file in the working
folder, over the defaults) and checks the same rules, but it only ever answers for the plain
case: a value it is not sure pydantic would read the same way (a bad number, an out-of-range
one, an empty path, a `.env` line without a value) makes it answer None, and the caller reads
the settings with pydantic, which either takes the value or says what to fix. So the two can
differ only in speed, and tests/test_settings.py holds them equal on every field.

`FIELDS` mirrors `app.settings.Settings` (a test compares them field by field): a field added
there and not here makes `quick_settings()` defer to pydantic, never misread.
"""

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from app.resources import resource_dir

SUPPORTED_DATABASE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")
ROLE_NAMES = ("reader", "editor", "admin")  # app.models.ROLES, without importing the tables
PREFIX = "PITFALLS_"
ENV_FILE = ".env"


class Field(NamedTuple):
    """One setting: its kind (path, optional path, str, int, float, bool, or the tuple of the
    values a Literal allows), its default, and its bounds."""

    kind: str | tuple[str, ...]
    default: Any
    ge: float | None = None
    gt: float | None = None
    le: float | None = None


FIELDS: dict[str, Field] = {
    "data_dir": Field("path", Path("data")),
    "database_url": Field("str", ""),
    "index_dir": Field("optional path", None),
    "search_engine": Field(("whoosh", "tantivy"), "whoosh"),
    "content_dir": Field("optional path", None),
    "first_start_snapshots": Field("str", ""),
    "sqlite_busy_timeout_ms": Field("int", 5000, ge=0),
    "write_queue_wait_ms": Field("int", 30_000, ge=100, le=600_000),
    "db_pool_size": Field("int", 20, ge=1, le=500),
    "db_pool_timeout_s": Field("float", 10.0, gt=0, le=600),
    "setup_lock_timeout_s": Field("float", 300.0, gt=0, le=86400),
    "index_check_interval_ms": Field("int", 1000, ge=0),
    "search_page_size": Field("int", 20, ge=1, le=200),
    "max_paste_bytes": Field("int", 1_000_000, ge=1000),
    "match_budget_ms": Field("int", 2000, ge=50, le=600_000),
    "search_budget_ms": Field("int", 1000, ge=50, le=600_000),
    "root_path": Field("str", ""),
    "public_url": Field("str", ""),
    "forwarded_allow_ips": Field("str", ""),
    "inbox": Field("bool", False),
    "inbox_per_client_per_hour": Field("int", 30, ge=1, le=100_000),
    "inbox_max_clusters": Field("int", 10_000, ge=1, le=10_000_000),
    "webhook_worker": Field("bool", True),
    "webhook_poll_interval_ms": Field("int", 1000, ge=50, le=600_000),
    "webhook_timeout_ms": Field("int", 5000, ge=100, le=60_000),
    "webhook_max_attempts": Field("int", 8, ge=1, le=50),
    "webhook_retry_base_ms": Field("int", 10_000, ge=10, le=3_600_000),
    "webhook_retry_max_ms": Field("int", 3_600_000, ge=10, le=86_400_000),
    "webhook_max_queue_rows": Field("int", 10_000, ge=10, le=10_000_000),
    "answer_token_days": Field("int", 7, ge=1, le=365),
    "reports_per_hour": Field("int", 60, ge=1, le=100_000),
    "anonymous_reports_per_hour": Field("int", 20, ge=1, le=100_000),
    "log_level": Field("str", "info"),
    "log_format": Field("str", "text"),
    "public_read": Field("bool", True),
    "secret_key": Field("str", ""),
    "secure_cookies": Field("bool", False),
    "session_days": Field("int", 14, ge=1, le=365),
    "local_passwords": Field("bool", True),
    "oidc_discovery_url": Field("str", ""),
    "oidc_provider_name": Field("str", "single sign-on"),
    "oidc_client_id": Field("str", ""),
    "oidc_client_secret": Field("str", ""),
    "oidc_scopes": Field("str", "openid profile email"),
    "oidc_groups_claim": Field("str", "groups"),
    "oidc_role_map": Field("str", ""),
    "oidc_default_role": Field(("reader", "editor", "admin"), "reader"),
    "oidc_provider_logout": Field("bool", False),
    "oidc_timeout_s": Field("float", 10.0, gt=0, le=120),
}

# pydantic's lax reading of a bool from text (case does not matter).
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}
_INT = re.compile(r"[0-9]{1,18}")
_FLOAT = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,15})?")


# -- the rules, shared with app.settings' validators ----------------------------------------


def clean_secret_key(value: str) -> str:
    if value and len(value) < 32:
        raise ValueError("the secret key must have at least 32 characters (or be empty)")
    return value


def clean_root_path(value: str) -> str:
    value = value.strip().rstrip("/")
    if value and (not value.startswith("/") or "//" in value or " " in value):
        raise ValueError(f"{value!r} must be a path such as /kb (or empty)")
    return value


def clean_public_url(value: str) -> str:
    value = value.strip().rstrip("/")
    if value and not value.startswith(("https://", "http://")):
        raise ValueError(f"{value!r} must start with https:// (or http://)")
    return value


def clean_discovery_url(value: str) -> str:
    value = value.strip()
    if value and not value.startswith(("https://", "http://")):
        raise ValueError(
            f"{value!r} must be the provider's https:// address of "
            "/.well-known/openid-configuration (or empty)"
        )
    return value


def parse_role_map(text: str) -> dict[str, str]:
    """`pitfalls-admins=admin, ml-team=editor` as {group: role}; ValueError naming a bad pair."""
    mapping: dict[str, str] = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        group, equals, role = pair.rpartition("=")
        group, role = group.strip(), role.strip()
        if not equals or not group or role not in ROLE_NAMES:
            raise ValueError(
                f"{pair.strip()!r} is not a group=role pair: write group=reader, group=editor "
                "or group=admin, pairs separated by commas"
            )
        mapping[group] = role
    return mapping


def clean_role_map(value: str) -> str:
    parse_role_map(value)  # raises with the pair to fix
    return value.strip()


def clean_log_level(value: str) -> str:
    if value.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError("use debug, info, warning or error")
    return value.lower()


def clean_log_format(value: str) -> str:
    if value.lower() not in ("text", "json"):
        raise ValueError("use text or json")
    return value.lower()


def clean_database_url(value: str) -> str:
    if value:
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in SUPPORTED_DATABASE_SCHEMES:
            raise ValueError(
                f"unsupported database URL {value!r}: use sqlite:///path/to/pitfalls.db "
                "or postgresql+psycopg://user:password@host/dbname"
            )
    return value


CLEANERS = {
    "secret_key": clean_secret_key,
    "root_path": clean_root_path,
    "public_url": clean_public_url,
    "oidc_discovery_url": clean_discovery_url,
    "oidc_role_map": clean_role_map,
    "log_level": clean_log_level,
    "log_format": clean_log_format,
    "database_url": clean_database_url,
}


def fill_defaults(values: Any) -> None:
    """What the settings derive from each other, on `values` (an object with the fields as
    attributes, changed in place); ValueError saying what to set when they disagree."""
    if values.data_dir.exists() and not values.data_dir.is_dir():
        raise ValueError(
            f"data dir {values.data_dir} exists and is not a folder: "
            "point PITFALLS_DATA_DIR at a folder (it is created if missing)"
        )
    if not values.database_url:
        values.database_url = f"sqlite:///{(values.data_dir / 'pitfalls.db').as_posix()}"
    if values.index_dir is None:
        values.index_dir = values.data_dir / "index"
    if values.content_dir is None:
        local = Path("content")
        values.content_dir = local if local.is_dir() else resource_dir("content")
    if values.oidc_discovery_url and not values.oidc_client_id:
        raise ValueError(
            "PITFALLS_OIDC_CLIENT_ID is empty: set the client id the provider gave this site "
            "(or leave PITFALLS_OIDC_DISCOVERY_URL empty)"
        )
    if not values.local_passwords and not values.oidc_discovery_url:
        raise ValueError(
            "PITFALLS_LOCAL_PASSWORDS=false leaves nobody a way to log in in the browser: "
            "set PITFALLS_OIDC_DISCOVERY_URL too, or keep passwords on"
        )


# -- the quick reader ----------------------------------------------------------------------


class _Unsure(Exception):
    """A value the quick reader leaves to pydantic."""


class QuickSettings:
    """The settings as plain attributes (every field of `FIELDS`), for commands that only read
    them; `app.settings.full_settings()` reads the pydantic `Settings` for the rest."""

    data_dir: Path
    database_url: str
    index_dir: Path | None
    content_dir: Path | None
    search_engine: str
    max_paste_bytes: int

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def _raw_values() -> dict[str, str]:
    """Each field's text from the environment over the `.env` file (pydantic-settings' order)."""
    found: dict[str, str] = {}
    if os.path.lexists(ENV_FILE):
        from dotenv import dotenv_values

        try:
            from_file = dotenv_values(ENV_FILE, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _Unsure from exc
        found.update(_ours(from_file))
    found.update(_ours(os.environ))
    return found


def _ours(variables: Any) -> dict[str, str]:
    """The PITFALLS_* variables by field name; names match in any case, as pydantic's do."""
    ours: dict[str, str] = {}
    prefix = PREFIX.lower()
    for name, value in variables.items():
        lowered = name.lower()
        if not lowered.startswith(prefix):
            continue
        field = lowered[len(prefix) :]
        if field not in FIELDS:
            continue  # extra="ignore"
        if value is None or (field in ours and ours[field] != value):
            raise _Unsure  # no value, or two spellings of one name that disagree
        ours[field] = value
    return ours


def _bounded(field: Field, number: float) -> None:
    if field.ge is not None and not number >= field.ge:
        raise _Unsure
    if field.gt is not None and not number > field.gt:
        raise _Unsure
    if field.le is not None and not number <= field.le:
        raise _Unsure


def _read(name: str, text: str) -> Any:
    field = FIELDS[name]
    kind = field.kind
    if isinstance(kind, tuple):
        if text not in kind:
            raise _Unsure
        return text
    if kind == "str":
        return text
    if kind == "path":
        if not text:
            raise _Unsure
        return Path(text)
    if kind == "optional path":
        return None if not text.strip() else Path(text)
    if kind == "bool":
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise _Unsure
    if kind == "int":
        if not _INT.fullmatch(text):
            raise _Unsure
        number = int(text)
        _bounded(field, number)
        return number
    if kind == "float":
        if not _FLOAT.fullmatch(text):
            raise _Unsure
        real = float(text)
        _bounded(field, real)
        return real
    raise _Unsure


def quick_settings() -> QuickSettings | None:
    """The settings as `app.settings.load_settings()` would read them, without pydantic; None
    where that is not certain (then read them with `load_settings()`)."""
    try:
        raw = _raw_values()
        values = {name: field.default for name, field in FIELDS.items()}
        for name, text in raw.items():
            values[name] = _read(name, text)
        for name, clean in CLEANERS.items():
            values[name] = clean(values[name])
        settings = QuickSettings(values)
        fill_defaults(settings)
    except (_Unsure, ValueError, OSError):
        return None
    return settings
