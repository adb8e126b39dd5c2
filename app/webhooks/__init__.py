"""Webhooks: admins register addresses that are told, by an HTTP POST, when entries are created,
changed or archived and when the inbox sees a new error or one crosses a count.

`hooks` keeps the registrations (an address, its events, a body format, an optional signing
secret), `queue` writes one delivery row per hook in the transaction of the change that caused
the event, and `delivery` sends the due rows, retrying with backoff, from the server's worker
thread (`worker`) or from `pitfalls webhooks deliver`. Nothing is ever sent on a request's path.
"""

from app.webhooks.delivery import (
    DeliveryRound,
    DeliveryRules,
    deliver_due,
    render_body,
    retry_delay_s,
    signature_of,
)
from app.webhooks.hooks import (
    DEFAULT_THRESHOLD,
    MAX_HOOKS,
    MAX_SECRET_LENGTH,
    MAX_THRESHOLD,
    MAX_URL_LENGTH,
    MIN_SECRET_LENGTH,
    HookOut,
    WebhookError,
    add_hook,
    check_url,
    generate_secret,
    list_hooks,
    mask_secret,
    remove_hook,
)
from app.webhooks.queue import (
    MAX_PENDING,
    DeliveryOut,
    enqueue_entry_event,
    enqueue_inbox_event,
    recent_deliveries,
)
from app.webhooks.worker import WebhookWorker

__all__ = [
    "DEFAULT_THRESHOLD",
    "MAX_HOOKS",
    "MAX_PENDING",
    "MAX_SECRET_LENGTH",
    "MAX_THRESHOLD",
    "MAX_URL_LENGTH",
    "MIN_SECRET_LENGTH",
    "DeliveryOut",
    "DeliveryRound",
    "DeliveryRules",
    "HookOut",
    "WebhookError",
    "WebhookWorker",
    "add_hook",
    "check_url",
    "deliver_due",
    "enqueue_entry_event",
    "enqueue_inbox_event",
    "generate_secret",
    "list_hooks",
    "mask_secret",
    "recent_deliveries",
    "remove_hook",
    "render_body",
    "retry_delay_s",
    "signature_of",
]
