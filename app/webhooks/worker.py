"""The server's webhook worker: a thread that sends due deliveries between requests.

It looks every interval, and at once when this process commits a transaction that queued a
delivery (a commit listener wakes it), so a save is answered before anything is sent, and a
slow receiver holds only this thread (and within it only its own webhook's deliveries).
Other processes' events are found by the timed look.
"""

import logging
import threading
import weakref

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session as OrmSession

from app.webhooks.delivery import DeliveryRules, deliver_due
from app.webhooks.queue import QUEUED

logger = logging.getLogger(__name__)

_workers: "weakref.WeakSet[WebhookWorker]" = weakref.WeakSet()
_workers_lock = threading.Lock()


@event.listens_for(OrmSession, "after_commit")
def _queued_committed(session: OrmSession) -> None:
    if not session.info.pop(QUEUED, False):
        return
    with _workers_lock:
        workers = list(_workers)
    for worker in workers:
        worker.wake()


@event.listens_for(OrmSession, "after_rollback")
def _queued_rolled_back(session: OrmSession) -> None:
    session.info.pop(QUEUED, None)  # nothing was queued after all


class WebhookWorker:
    def __init__(self, engine: Engine, rules: DeliveryRules, interval_ms: int) -> None:
        self.engine = engine
        self.rules = rules
        self.interval_s = interval_ms / 1000
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0  # rounds run, for tests and the curious

    def start(self) -> None:
        with _workers_lock:
            _workers.add(self)
        self._thread = threading.Thread(target=self._run, name="pitfalls-webhooks", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with _workers_lock:
            _workers.discard(self)
        if self._thread is not None:
            self._thread.join(timeout=self.rules.timeout_s + 2)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                while not self._stop.is_set():
                    done = deliver_due(self.engine, self.rules)
                    self.rounds += 1
                    if done.attempted == 0:
                        break  # nothing more due now: wait for the next look
            except Exception:
                logger.exception("delivering webhooks failed; trying again next interval")
