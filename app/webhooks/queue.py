"""The delivery queue: one row per (event, webhook), written in the transaction of the change
that caused the event, so an event is queued exactly when its change commits.

The queue is bounded: past MAX_PENDING undelivered rows a new event is skipped with a log line
(a receiver that has been down for days must not fill the database), and the delivery log of
finished rows is pruned by the worker to PITFALLS_WEBHOOK_MAX_QUEUE_ROWS.
"""

import logging
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlmodel import Session, col, func, select

from app.models import UtcTimestamp, Webhook, WebhookDelivery, utc_iso, utcnow

logger = logging.getLogger(__name__)

MAX_PENDING = 10_000
MAX_TITLE = 300
UNFINISHED = ("pending", "delivering")
QUEUED = "pitfalls_webhook_queued"  # Session.info flag: this transaction queued a delivery

ENTRY_EVENTS = {
    "create": "entry.created",
    "update": "entry.changed",
    "restore": "entry.changed",
    "archive": "entry.archived",
}


def _subscribers(session: Session, event: str) -> list[Webhook]:
    # Few rows (MAX_HOOKS at most): the event filter runs here, portable on both databases.
    return [hook for hook in session.exec(select(Webhook)).all() if event in hook.events]


def _enqueue(
    session: Session,
    hooks: list[Webhook],
    *,
    event: str,
    payload: dict[str, Any],
    max_pending: int,
) -> int:
    if not hooks:
        return 0
    pending = session.exec(
        select(func.count())
        .select_from(WebhookDelivery)
        .where(col(WebhookDelivery.status).in_(UNFINISHED))
    ).one()
    room = max_pending - pending
    if room < len(hooks):
        logger.warning(
            "webhook queue full (%d undelivered): %s %s not queued for %d of %d webhooks",
            pending,
            event,
            payload.get("id", ""),
            len(hooks) - max(room, 0),
            len(hooks),
        )
        hooks = hooks[: max(room, 0)]
    now = utcnow()
    for hook in hooks:
        assert hook.id is not None
        session.add(
            WebhookDelivery(
                hook_id=hook.id,
                event=event,
                payload=payload,
                next_attempt_at=now,
                created_at=now,
            )
        )
    if hooks:
        session.info[QUEUED] = True  # wakes this process's worker at commit
    return len(hooks)


def enqueue_entry_event(
    session: Session,
    *,
    action: str,
    entry_id: str,
    title: str,
    actor: str,
    max_pending: int = MAX_PENDING,
) -> int:
    """Queue the event of an entry's change (`action` as in the change feed) for every webhook
    that asked for it, in the caller's transaction; the number of rows queued."""
    event = ENTRY_EVENTS.get(action)
    if event is None:
        return 0
    payload = {
        "event": event,
        "id": entry_id,
        "title": title[:MAX_TITLE],
        "path": f"/entries/{entry_id}",
        "time": utc_iso(utcnow()),
        "actor": actor,
    }
    return _enqueue(
        session, _subscribers(session, event), event=event, payload=payload, max_pending=max_pending
    )


def enqueue_inbox_event(
    session: Session,
    *,
    fingerprint: str,
    exception: str,
    message: str,
    count: int,
    new: bool,
    max_pending: int = MAX_PENDING,
) -> int:
    """Queue inbox.cluster_new (a cluster seen for the first time) and inbox.cluster_threshold
    for each webhook whose threshold `count` has just reached (counts grow by one, so each
    webhook hears of a cluster once)."""
    title = f"{exception}: {message}"[:MAX_TITLE]
    base = {
        "id": fingerprint,
        "title": title,
        "path": "/inbox",
        "time": utc_iso(utcnow()),
        "count": count,
    }
    queued = 0
    if new:
        event = "inbox.cluster_new"
        payload = {"event": event, **base}
        hooks = _subscribers(session, event)
        queued += _enqueue(session, hooks, event=event, payload=payload, max_pending=max_pending)
    event = "inbox.cluster_threshold"
    for hook in _subscribers(session, event):
        if hook.threshold == count:
            payload = {"event": event, **base, "threshold": hook.threshold}
            queued += _enqueue(
                session, [hook], event=event, payload=payload, max_pending=max_pending
            )
    return queued


class DeliveryOut(BaseModel):
    id: int
    hook_id: int
    url: str
    event: str
    subject: str  # the entry's id or the cluster's fingerprint
    status: str  # pending, delivering, delivered or failed
    status_code: int | None
    attempts: int
    next_attempt_at: UtcTimestamp | None  # None once finished
    error: str
    created_at: UtcTimestamp
    finished_at: UtcTimestamp | None


def recent_deliveries(session: Session, *, limit: int = 100) -> list[DeliveryOut]:
    """The newest deliveries first, finished or not, each with its webhook's address."""
    rows = session.exec(
        select(WebhookDelivery, Webhook.url)
        .join(Webhook, col(Webhook.id) == col(WebhookDelivery.hook_id))
        .order_by(col(WebhookDelivery.id).desc())
        .limit(limit)
    ).all()
    return [_delivery_out(row, url) for row, url in rows]


def _delivery_out(row: WebhookDelivery, url: str) -> DeliveryOut:
    unfinished = row.status in UNFINISHED
    next_at: datetime | None = row.next_attempt_at if unfinished else None
    return DeliveryOut(
        id=row.id or 0,
        hook_id=row.hook_id,
        url=url,
        event=row.event,
        subject=str(row.payload.get("id", "")),
        status=row.status,
        status_code=row.status_code,
        attempts=row.attempts,
        next_attempt_at=next_at,
        error=row.error,
        created_at=row.created_at,
        finished_at=row.finished_at,
    )
