"""Sending queued deliveries: claim a due row, POST its body, record what happened.

A row is claimed with one conditional UPDATE (pending and due, or delivering with its lease
run out), so with several processes on one database each row is sent by one of them; the
lease is longer than an attempt can take, and a process that died mid-attempt leaves a row
another takes up once the lease ends. An attempt is bounded: one deadline for connecting,
sending and reading, at most MAX_RESPONSE_BYTES of the answer read, and no redirect followed
(a 3xx is a failed attempt that names where it pointed). A failed attempt is retried after
base x 2^(attempt-1), capped, with jitter (half of it random), until the last attempt, which
marks the row failed.

The signature: `X-Pitfalls-Timestamp` is the attempt's Unix time in seconds, and
`X-Pitfalls-Signature` is `sha256=` and the hex HMAC-SHA256, keyed with the webhook's secret,
of the timestamp, a dot, and the raw body. A receiver recomputes it and refuses a timestamp
too far from its clock, so a recorded delivery cannot be replayed later.
"""

import contextlib
import hashlib
import hmac
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine, or_, update
from sqlmodel import Session, col, func, select

from app import __version__
from app.models import Webhook, WebhookDelivery, utcnow

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024
PARALLEL_HOOKS = 4  # webhooks sent to at once by one round
MAX_ERROR = 300
LEASE_MARGIN_S = 30
SIGNATURE_HEADER = "X-Pitfalls-Signature"
TIMESTAMP_HEADER = "X-Pitfalls-Timestamp"
EVENT_HEADER = "X-Pitfalls-Event"
DELIVERY_HEADER = "X-Pitfalls-Delivery"

_SLACK_WORDS = {
    "entry.created": "New entry",
    "entry.changed": "Entry changed",
    "entry.archived": "Entry archived",
    "inbox.cluster_new": "New unknown error in the inbox",
    "inbox.cluster_threshold": "Unknown error seen {count} times",
}


@dataclass(frozen=True)
class DeliveryRules:
    """How deliveries are made; `DeliveryRules.of(settings)` reads them from the settings."""

    timeout_s: float = 5.0
    max_attempts: int = 8
    retry_base_s: float = 10.0
    retry_max_s: float = 3600.0
    keep_rows: int = 10_000  # deliveries kept in all; finished ones beyond are pruned
    public_url: str = ""  # prefixed to the links in the bodies

    @classmethod
    def of(cls, settings: Any) -> "DeliveryRules":
        return cls(
            timeout_s=settings.webhook_timeout_ms / 1000,
            max_attempts=settings.webhook_max_attempts,
            retry_base_s=settings.webhook_retry_base_ms / 1000,
            retry_max_s=settings.webhook_retry_max_ms / 1000,
            keep_rows=settings.webhook_max_queue_rows,
            public_url=settings.public_url,
        )


@dataclass
class DeliveryRound:
    """What one call of `deliver_due` did."""

    delivered: int = 0
    retried: int = 0
    failed: int = 0
    pruned: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def attempted(self) -> int:
        return self.delivered + self.retried + self.failed


def retry_delay_s(
    attempts: int, rules: DeliveryRules, *, rng: random.Random | None = None
) -> float:
    """The wait after the `attempts`-th failed attempt: exponential, capped, half of it random."""
    delay = min(rules.retry_max_s, rules.retry_base_s * 2 ** max(0, attempts - 1))
    return delay / 2 + (rng or random).uniform(0, delay / 2)


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_body(body_format: str, payload: dict[str, Any], *, public_url: str = "") -> bytes:
    """The body of a delivery: our event JSON, or Slack's `{"text": ...}` with a link."""
    url = public_url.rstrip("/") + str(payload.get("path", "/"))
    if body_format == "slack":
        words = _SLACK_WORDS.get(str(payload.get("event")), str(payload.get("event")))
        words = words.format(count=payload.get("count", ""))
        title = _slack_escape(str(payload.get("title", "")))
        link = f"<{_slack_escape(url)}|{title}>" if url.startswith("http") else f"{title} ({url})"
        actor = f" by {_slack_escape(payload['actor'])}" if payload.get("actor") else ""
        return json.dumps({"text": f"{words}: {link}{actor}"}, ensure_ascii=False).encode()
    body = {key: value for key, value in payload.items() if key != "path"}
    body["url"] = url
    return json.dumps(body, ensure_ascii=False, sort_keys=True).encode()


def signature_of(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


@dataclass
class Attempt:
    status_code: int | None
    error: str  # empty when delivered

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class _NotResolvedInTime(TimeoutError):
    pass


def _resolve(host: str, port: int, timeout_s: float) -> list[tuple]:
    """`getaddrinfo` within `timeout_s`: the C resolver has no timeout of its own and can wait
    far past a delivery's deadline, so it runs in a thread of its own that is left behind
    (it ends when the resolver gives up) if it takes longer: _NotResolvedInTime then."""
    found: list[tuple] = []
    failed: list[BaseException] = []

    def look_up() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    worker = threading.Thread(target=look_up, name="webhook-resolve", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise _NotResolvedInTime
    if failed:
        raise failed[0]
    return found


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A connected socket to `host`, name resolution and connecting both within the deadline."""
    last: OSError | None = None
    for family, kind, proto, _, address in _resolve(host, port, deadline - time.monotonic()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(remaining)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise
            last = exc
    raise last or OSError(f"no address for {host}")


def post(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float) -> Attempt:
    """POST `body` to `url` within `timeout_s` in all, never following a redirect, reading at
    most MAX_RESPONSE_BYTES of the answer; what happened, in a sentence when it failed."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = time.monotonic() + timeout_s
    connection: http.client.HTTPConnection
    context = ssl.create_default_context() if parts.scheme == "https" else None
    if context is not None:
        connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    where = f"{host}:{port or (443 if parts.scheme == 'https' else 80)}"
    # Socket timeouts bound each read, not their sum: a receiver that drips its answer a byte
    # at a time is cut off at the deadline by closing the socket under the reader.
    cut = threading.Event()

    def cut_off() -> None:
        cut.set()
        if connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(timeout_s, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        # Connected here, within the deadline (http.client's own connect resolves the name
        # with no bound); the connection then uses this socket, keeping its Host header.
        sock = _connect(host, port or (443 if parts.scheme == "https" else 80), deadline)
        if context is not None:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            sock = context.wrap_socket(sock, server_hostname=host)
        connection.sock = sock
        connection.request("POST", target, body=body, headers=headers)
        if connection.sock is not None:
            connection.sock.settimeout(max(0.05, deadline - time.monotonic()))
        response = connection.getresponse()
        read = 0
        head = b""
        while read < MAX_RESPONSE_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if connection.sock is not None:
                connection.sock.settimeout(remaining)
            chunk = response.read1(min(8192, MAX_RESPONSE_BYTES - read))
            if not chunk:
                break
            if len(head) < 200:
                head += chunk[: 200 - len(head)]
            read += len(chunk)
        code = response.status
        if cut.is_set():
            raise TimeoutError
    except ConnectionRefusedError:
        return Attempt(None, f"The receiver refused the connection (nothing listens at {where}).")
    except _NotResolvedInTime:
        return Attempt(None, f"The host name {host!r} was not resolved within {timeout_s:g} s.")
    except TimeoutError:
        return Attempt(None, f"No answer from {where} within {timeout_s:g} s.")
    except socket.gaierror:
        return Attempt(None, f"The host name {host!r} could not be resolved.")
    except ssl.SSLError as exc:
        return Attempt(None, f"The TLS connection to {where} failed: {exc.reason or exc}.")
    except (OSError, http.client.HTTPException) as exc:
        if cut.is_set():
            return Attempt(None, f"No answer from {where} within {timeout_s:g} s.")
        return Attempt(None, f"Sending to {where} failed: {type(exc).__name__}: {exc}"[:MAX_ERROR])
    finally:
        watchdog.cancel()
        connection.close()
    if 200 <= code < 300:
        return Attempt(code, "")
    if 300 <= code < 400:
        location = response.getheader("Location", "")[:200]
        return Attempt(
            code,
            f"The receiver answered {code}, a redirect to {location!r}; redirects are not "
            "followed: register the address it points to.",
        )
    said = head.decode("utf-8", "replace").strip().replace("\n", " ")[:120]
    return Attempt(code, f"The receiver answered {code}" + (f": {said}" if said else "."))


def _due(now: datetime):
    """A row that may be claimed now: pending and due, or delivering with its lease run out."""
    return or_(
        (col(WebhookDelivery.status) == "pending") & (col(WebhookDelivery.next_attempt_at) <= now),
        (col(WebhookDelivery.status) == "delivering") & (col(WebhookDelivery.lease_until) < now),
    )


def _claim(engine: Engine, delivery_id: int, rules: DeliveryRules) -> int | None:
    """Take one row for this process; its attempt number, or None when another took it."""
    now = utcnow()
    with Session(engine) as session:
        claimed = session.exec(
            update(WebhookDelivery)
            .where(col(WebhookDelivery.id) == delivery_id, _due(now))
            .values(
                status="delivering",
                attempts=WebhookDelivery.attempts + 1,
                lease_until=now + timedelta(seconds=rules.timeout_s + LEASE_MARGIN_S),
            )
        ).rowcount
        session.commit()
        if claimed != 1:
            return None
        row = session.get(WebhookDelivery, delivery_id)
        return None if row is None else row.attempts


def _record(
    engine: Engine, delivery_id: int, attempt_number: int, attempt: Attempt, rules: DeliveryRules
) -> str:
    """Write the attempt's outcome on its row (unless another process has taken the row over
    since: then the newer attempt's outcome counts); delivered, pending or failed."""
    now = utcnow()
    if attempt.delivered:
        state, next_at = "delivered", now
    elif attempt_number >= rules.max_attempts:
        state, next_at = "failed", now
    else:
        state = "pending"
        next_at = now + timedelta(seconds=retry_delay_s(attempt_number, rules))
    finished = now if state != "pending" else None
    with Session(engine) as session:
        session.exec(
            update(WebhookDelivery)
            .where(
                col(WebhookDelivery.id) == delivery_id,
                col(WebhookDelivery.status) == "delivering",
                col(WebhookDelivery.attempts) == attempt_number,
            )
            .values(
                status=state,
                next_attempt_at=next_at,
                lease_until=None,
                status_code=attempt.status_code,
                error=attempt.error[:MAX_ERROR],
                finished_at=finished,
            )
        )
        session.commit()
    return state


def _headers(hook: Webhook, row: WebhookDelivery, body: bytes) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"pitfalls/{__version__}",
        EVENT_HEADER: row.event,
        DELIVERY_HEADER: str(row.id),  # the same on every attempt: a receiver can drop repeats
        "Connection": "close",
    }
    if hook.secret:
        timestamp = str(int(time.time()))
        headers[TIMESTAMP_HEADER] = timestamp
        headers[SIGNATURE_HEADER] = signature_of(hook.secret, timestamp, body)
    return headers


def _prune(engine: Engine, keep_rows: int) -> int:
    """Drop the oldest finished deliveries past `keep_rows` rows in all."""
    with Session(engine) as session:
        held = session.exec(select(func.count()).select_from(WebhookDelivery)).one()
        if held <= keep_rows:
            return 0
        oldest = session.exec(
            select(WebhookDelivery.id)
            .where(col(WebhookDelivery.status).in_(("delivered", "failed")))
            .order_by(col(WebhookDelivery.id))
            .limit(held - keep_rows)
        ).all()
        if not oldest:
            return 0
        session.exec(
            WebhookDelivery.__table__.delete().where(  # type: ignore[attr-defined]
                col(WebhookDelivery.id).in_(oldest)
            )
        )
        session.commit()
        return len(oldest)


def _deliver_one(engine: Engine, delivery_id: int, rules: DeliveryRules) -> tuple[str, str]:
    """Claim, send and record one delivery: its new state ("" when another process had it, or
    it was removed meanwhile) and the attempt's error."""
    attempt_number = _claim(engine, delivery_id, rules)
    if attempt_number is None:
        return "", ""
    with Session(engine) as session:
        row = session.get(WebhookDelivery, delivery_id)
        hook = None if row is None else session.get(Webhook, row.hook_id)
        if row is None or hook is None:
            return "", ""  # removed meanwhile, with its webhook
        session.expunge_all()
    body = render_body(hook.body_format, row.payload, public_url=rules.public_url)
    attempt = post(hook.url, body, _headers(hook, row, body), timeout_s=rules.timeout_s)
    state = _record(engine, delivery_id, attempt_number, attempt, rules)
    if state == "failed":
        logger.warning(
            "webhook delivery %d (%s to %s) failed after %d attempts: %s",
            delivery_id,
            row.event,
            hook.url,
            attempt_number,
            attempt.error,
        )
    return state, attempt.error


def _deliver_in_turn(engine: Engine, ids: list[int], rules: DeliveryRules) -> list[tuple[str, str]]:
    return [_deliver_one(engine, delivery_id, rules) for delivery_id in ids]


def deliver_due(engine: Engine, rules: DeliveryRules, *, limit: int = 20) -> DeliveryRound:
    """Send up to `limit` due deliveries and prune the log. Each webhook's deliveries go in
    turn, oldest first; different webhooks' at once (up to PARALLEL_HOOKS), so a slow receiver
    delays only its own."""
    done = DeliveryRound()
    with Session(engine) as session:
        due = session.exec(
            select(WebhookDelivery.id, WebhookDelivery.hook_id)
            .where(_due(utcnow()))
            .order_by(col(WebhookDelivery.next_attempt_at), col(WebhookDelivery.id))
            .limit(limit)
        ).all()
    by_hook: dict[int, list[int]] = {}
    for delivery_id, hook_id in due:
        assert delivery_id is not None
        by_hook.setdefault(hook_id, []).append(delivery_id)
    if len(by_hook) <= 1:
        outcomes = [_deliver_in_turn(engine, ids, rules) for ids in by_hook.values()]
    else:
        with ThreadPoolExecutor(min(PARALLEL_HOOKS, len(by_hook))) as pool:
            outcomes = list(
                pool.map(lambda ids: _deliver_in_turn(engine, ids, rules), by_hook.values())
            )
    for state, error in (outcome for group in outcomes for outcome in group):
        if state == "delivered":
            done.delivered += 1
        elif state == "failed":
            done.failed += 1
        elif state == "pending":
            done.retried += 1
        if error:
            done.errors.append(error)
    done.pruned = _prune(engine, rules.keep_rows)
    return done
