"""The webhooks admins register: checked addresses, chosen events, a body format, a secret.

The secret is kept as given, since each delivery is signed with it, and is shown only at
creation; afterwards only a masked form (its last four characters). An address must be http or
https with a host; anything else is refused with a sentence saying what to write instead.
"""

import ipaddress
import re
import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit

from pydantic import BaseModel, Field
from sqlmodel import Session, col, func, select

from app.accounts import Principal, audit
from app.errors import PitfallsError
from app.models import WEBHOOK_EVENTS, WEBHOOK_FORMATS, UtcTimestamp, Webhook

MAX_HOOKS = 50
MAX_URL_LENGTH = 2000
MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 200
DEFAULT_THRESHOLD = 10
MAX_THRESHOLD = 1_000_000
_HOST = re.compile(r"^[A-Za-z0-9_.-]+$")


class WebhookError(PitfallsError):
    """A webhook that cannot be registered (or removed) as asked; the message says why."""

    status = 422


def check_url(url: str) -> str:
    """The address, stripped; WebhookError with a sentence for one nothing could be sent to."""
    url = url.strip()
    if not url:
        raise WebhookError(
            "Give the address to send events to, e.g. https://chat.example.org/hook."
        )
    if len(url) > MAX_URL_LENGTH:
        raise WebhookError(f"The address is longer than {MAX_URL_LENGTH} characters.")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise WebhookError("The address has spaces or control characters; encode them (%20).")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise WebhookError(
            f"A webhook address starts with https:// (or http://); {url[:60]!r} does not."
        )
    try:
        port = parts.port
    except ValueError:
        raise WebhookError("The address's port is not a number from 1 to 65535.") from None
    if port == 0:
        raise WebhookError("The address's port is not a number from 1 to 65535.")
    if parts.username is not None or parts.password is not None:
        raise WebhookError(
            "Put no user name or password in the address: give a secret instead, and the "
            "receiver checks the signature."
        )
    if parts.fragment:
        raise WebhookError("The part after '#' is never sent to a server; remove it.")
    host = parts.hostname or ""
    if not host:
        raise WebhookError("The address has no host name, e.g. https://chat.example.org/hook.")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not _HOST.match(host) or host.startswith((".", "-")) or ".." in host:
            raise WebhookError(f"{host!r} is not a host name one can send to.") from None
    else:
        if address.is_unspecified or address.is_multicast:
            raise WebhookError(f"{host} is not an address one can send to.")
    return url


def _check_events(events: Iterable[str]) -> list[str]:
    chosen = sorted(
        set(events), key=lambda e: WEBHOOK_EVENTS.index(e) if e in WEBHOOK_EVENTS else 99
    )
    unknown = [e for e in chosen if e not in WEBHOOK_EVENTS]
    if unknown:
        raise WebhookError(
            f"Unknown event {unknown[0]!r}: choose from {', '.join(WEBHOOK_EVENTS)}."
        )
    if not chosen:
        raise WebhookError("Choose at least one event to be told of.")
    return chosen


def _check_secret(secret: str | None) -> str | None:
    if secret is None or not secret.strip():
        return None
    secret = secret.strip()
    if not MIN_SECRET_LENGTH <= len(secret) <= MAX_SECRET_LENGTH:
        raise WebhookError(
            f"A secret has {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters; leave it "
            "empty for unsigned deliveries, or have one generated."
        )
    if any(c.isspace() or not c.isprintable() for c in secret):
        raise WebhookError("A secret has no spaces or control characters.")
    return secret


def generate_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def mask_secret(secret: str | None) -> str | None:
    """What a page shows of a secret after its creation: only that there is one, and its end."""
    if not secret:
        return None
    return "…" + secret[-4:] if len(secret) >= MIN_SECRET_LENGTH else "…"


class HookOut(BaseModel):
    id: int
    url: str
    events: list[str]
    body_format: str = Field(description='json (our event JSON) or slack ({"text": ...}).')
    threshold: int = Field(description="The count at which inbox.cluster_threshold fires.")
    signed: bool = Field(description="Whether deliveries carry an X-Pitfalls-Signature.")
    secret_hint: str | None = Field(description="The secret's last characters; never all of it.")
    created_by: str
    created_at: UtcTimestamp

    @classmethod
    def of(cls, hook: Webhook) -> "HookOut":
        return cls(
            id=hook.id or 0,
            url=hook.url,
            events=list(hook.events),
            body_format=hook.body_format,
            threshold=hook.threshold,
            signed=bool(hook.secret),
            secret_hint=mask_secret(hook.secret),
            created_by=hook.created_by,
            created_at=hook.created_at,
        )


def add_hook(
    session: Session,
    *,
    url: str,
    events: Iterable[str],
    body_format: str = "json",
    secret: str | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    actor: Principal,
) -> Webhook:
    """Register a webhook (the caller commits); WebhookError says what is wrong with it."""
    url = check_url(url)
    chosen = _check_events(events)
    if body_format not in WEBHOOK_FORMATS:
        raise WebhookError(f"Unknown body format {body_format!r}: use json or slack.")
    if not 1 <= threshold <= MAX_THRESHOLD:
        raise WebhookError(f"The threshold is a count from 1 to {MAX_THRESHOLD}.")
    held = session.exec(select(func.count()).select_from(Webhook)).one()
    if held >= MAX_HOOKS:
        raise WebhookError(f"There are {MAX_HOOKS} webhooks already; remove one first.")
    hook = Webhook(
        url=url,
        events=chosen,
        body_format=body_format,
        secret=_check_secret(secret),
        threshold=threshold,
        created_by=actor.label,
    )
    session.add(hook)
    session.flush()
    audit(session, actor, "webhook.add", f"webhook {hook.id}", f"{url} ({', '.join(chosen)})")
    return hook


def list_hooks(session: Session) -> list[Webhook]:
    return list(session.exec(select(Webhook).order_by(col(Webhook.id))).all())


def remove_hook(session: Session, *, hook_id: int, actor: Principal) -> Webhook:
    """Remove a webhook and its queued and logged deliveries (the caller commits)."""
    hook = session.get(Webhook, hook_id)
    if hook is None:
        raise WebhookError(f"There is no webhook {hook_id}.", status=404)
    session.delete(hook)  # its deliveries go with it (ON DELETE CASCADE)
    audit(session, actor, "webhook.remove", f"webhook {hook_id}", hook.url)
    return hook
