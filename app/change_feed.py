"""Following the database's change sequence from a process's derived caches, cheaply."""

import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session

from app import storage

logger = logging.getLogger(__name__)


# The watchers of each engine in this process: a commit that wrote to the feed expires them at
# once, before the response that reports the write is sent (so the next paste or search of the
# same client sees it, whatever the interval, and whichever thread polled last).
_watchers: "weakref.WeakKeyDictionary[Engine, weakref.WeakSet[ChangeWatcher]]" = (
    weakref.WeakKeyDictionary()
)
_watchers_lock = threading.Lock()


# Commits made by this process, counted: any of them may move the content mark (an outcome or a
# verify result writes no change but shows on pages), so `MarkReader` reads it again after one.
_commits = [0]


def commit_count() -> int:
    """How many commits this process has made (of any session, on any engine)."""
    return _commits[0]


@event.listens_for(OrmSession, "after_commit")
def _committed(session: OrmSession) -> None:
    """The one commit listener: counts the commit, and when it wrote to the change feed
    expires this engine's watchers (the search index's and the matcher's)."""
    _commits[0] += 1
    if not session.info.pop(storage.FEED_WRITTEN, False):
        return
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    with _watchers_lock:
        watchers = list(_watchers.get(engine, ()))
    for watcher in watchers:
        watcher.expire()


class ChangeWatcher:
    """Reads the change feed's mark (count and highest number) at most once per interval."""

    def __init__(self, engine: Engine, interval_ms: int) -> None:
        self.engine = engine
        self.interval_s = interval_ms / 1000
        self._checked_at = float("-inf")
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # held while the database is being read
        self._last_lock = threading.Lock()
        self.last: storage.FeedMark | None = None  # the newest mark read, by any thread
        self.problem: str | None = None  # why the last read failed (the database is down)
        with _watchers_lock:
            _watchers.setdefault(engine, weakref.WeakSet()).add(self)

    def expire(self) -> None:
        """Make the next poll read the database (after this process wrote to it)."""
        with self._lock:
            self._checked_at = float("-inf")

    def poll(self, force: bool = False) -> storage.FeedMark | None:
        """The feed's mark, or None when it was read less than an interval ago.

        A read under way in another thread (the feed follower, woken by the very commit this
        caller wants to see) is waited for, so that `last` is never older than the newest read
        started: the reader takes `_reading` before it lets go of `_lock`.
        """
        with self._lock:
            now = time.monotonic()
            throttled = not force and now - self._checked_at < self.interval_s
            if not throttled:
                self._checked_at = now
                self._reading.acquire()
        if throttled:
            with self._reading:  # wait for a read that started before this call, if any
                return None
        try:
            try:
                with Session(self.engine) as session:
                    mark = storage.feed_mark(session)
            except Exception as error:
                # The database is down: the caches keep what they have, and say so.
                self.problem = storage.database_problem(error)
                if self.problem is None:
                    raise
                logger.warning("reading the change feed failed: %s", error)
                return None
            self.problem = None
            with self._last_lock:
                # Reads may still overlap (a forced one): an older read finishing last must not
                # put back an older mark. The feed only grows, so newer is larger.
                if self.last is None or (mark.seq, mark.count) >= (
                    self.last.seq,
                    self.last.count,
                ):
                    self.last = mark
            return mark
        finally:
            self._reading.release()


NOTIFY_CHANNEL = "pitfalls_changes"
# How often a process on SQLite asks whether another one wrote to the file (a cheap question).
SQLITE_WATCH_S = 0.1


class FeedFollower:
    """Keeps a process's caches current between requests, in a thread of its own.

    On PostgreSQL it LISTENs on the channel every writer NOTIFYs at commit, so an edit made on
    another replica is applied here at once; on SQLite it watches the file's `data_version`
    (`_watch_sqlite`), so an edit made by another process on the same file is applied within
    `SQLITE_WATCH_S`. A notification can be lost (a dropped connection, a
    replica starting), so it also calls `on_change` every interval whatever it heard: the timed
    check, which compares the feed's count and highest number with what the caches applied, is
    the guarantee; the notification only makes it sooner.
    """

    def __init__(self, engine: Engine, interval_ms: int, on_change: Callable[[], None]) -> None:
        self.engine = engine
        self.interval_s = max(0.2, interval_ms / 1000)
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = False  # true while a LISTEN connection is open

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pitfalls-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 2)

    def _apply(self) -> None:
        try:
            self.on_change()
        except Exception:
            logger.exception("bringing the caches up to the change feed failed")

    def _run(self) -> None:
        backend = self.engine.url.get_backend_name()
        while not self._stop.is_set():
            if backend == "postgresql":
                self._listen()
            elif backend == "sqlite":
                self._watch_sqlite()
            if not self._stop.wait(self.interval_s):
                self._apply()

    def _watch_sqlite(self) -> None:
        """SQLite sends no notification, but `PRAGMA data_version`, asked again and again on one
        connection, moves whenever another connection (another process) committed to the file:
        a question that reads no table, so it is asked every `SQLITE_WATCH_S`, and the caches
        catch up as soon as it moves (and every interval whatever it says). Returns when
        stopped, or when the file cannot be opened (then the caller checks every interval)."""
        path = self.engine.url.database
        if not path or path == ":memory:" or path.startswith("file:"):
            return  # one process's database: this process's commits expire its caches
        try:
            connection = sqlite3.connect(path, timeout=1.0, check_same_thread=False)
        except sqlite3.Error as exc:
            logger.warning("watching the database file failed (%s); checking every interval", exc)
            return
        try:
            version = None
            due = time.monotonic() + self.interval_s
            while not self._stop.wait(SQLITE_WATCH_S):
                try:
                    moved = connection.execute("PRAGMA data_version").fetchone()[0]
                except sqlite3.Error:
                    moved = None  # busy or gone for a moment: the timed check still runs
                now = time.monotonic()
                if (moved is not None and moved != version) or now >= due:
                    version, due = moved, now + self.interval_s
                    self._apply()
        finally:
            connection.close()

    def _listen(self) -> None:
        """Wait on LISTEN until stopped or the connection fails (then the caller falls back to
        the timed check for one interval, and comes back here)."""
        import psycopg

        url = self.engine.url.set(drivername="postgresql")
        try:
            with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as c:
                c.execute(f"LISTEN {NOTIFY_CHANNEL}")
                self.listening = True
                self._apply()  # whatever committed before LISTEN took effect
                while not self._stop.is_set():
                    # Back after the first notification, or after an interval without one; a
                    # wake-up applies every change there is, however many were notified.
                    for _ in c.notifies(timeout=self.interval_s, stop_after=1):
                        pass
                    if not self._stop.is_set():
                        self._apply()
        except Exception as exc:
            logger.warning("listening for changes failed (%s); checking every interval", exc)
