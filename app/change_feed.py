"""Following the database's change sequence from a process's derived caches, cheaply."""

import threading
import time

from sqlalchemy import Engine
from sqlmodel import Session

from app import storage


class ChangeWatcher:
    """Reads the newest change sequence at most once per interval."""

    def __init__(self, engine: Engine, interval_ms: int) -> None:
        self.engine = engine
        self.interval_s = interval_ms / 1000
        self._checked_at = float("-inf")
        self._lock = threading.Lock()

    def expire(self) -> None:
        """Make the next poll read the database (after this process wrote to it)."""
        with self._lock:
            self._checked_at = float("-inf")

    def poll(self, force: bool = False) -> int | None:
        """The database's change sequence, or None when it was read less than an interval ago."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._checked_at < self.interval_s:
                return None
            self._checked_at = now
        with Session(self.engine) as session:
            return storage.current_change_seq(session)
