"""Readers' pages and their JSON, served from memory while nothing they show has changed.

Pure ASGI middleware in front of the session middleware. For a GET of a reader's page or its
JSON twin (home, search, tags, entries) by an anonymous visitor (no session cookie, no
`Authorization`) on a site whose reading is public, it takes the database's content mark (the
change feed, outcome reports, verify results: one small query, made at most every 100 ms and
after each commit of this process, so that a page served from memory costs no query) and
- answers from a bounded LRU of rendered responses kept under that mark and URL, or renders the
  page and keeps it (only a 200 that sets no cookie, rendered while this process's search index
  and matcher stood at the same feed mark);
- gives every such response an `ETag` (the route's own where it sets one: an entry's JSON keeps
  its revision, which `If-Match` compares) and answers `If-None-Match` with 304.

A write moves the mark, so the next request renders afresh and gets a new ETag; nothing is kept
past a change. Signed-in visitors and every other route pass through untouched.
"""

import hashlib
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

import anyio
from sqlmodel import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, storage
from app.change_feed import commit_count
from app.search.index import read_state
from app.web.auth import SESSION_COOKIE
from app.web.middleware.twins import route_path

# Reader routes whose answer is a function of the URL and the content mark alone, for anonymous
# visitors. The entry routes exclude the editor's own paths.
CACHED_PATHS = re.compile(
    r"^(?:/|/search|/tags/[^/]+|/entries/(?!(?:new|check)$)[^/]+"
    r"|/api/v1/(?:search|overview|tags/[^/]+|entries/[^/]+))$"
)
MAX_ENTRIES = 1024
MARK_INTERVAL_S = 0.1  # how long a content mark read from the database is used without asking
MAX_BYTES = 64 << 20
# Headers a kept response must not carry to another request.
_PER_REQUEST = {b"x-request-id", b"set-cookie", b"date", b"server"}


@dataclass(frozen=True)
class Kept:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    etag: bytes
    route: object = None  # for the request metrics, as if the route had answered


class ResponseCache:
    """A bounded LRU of rendered responses (by count and by bytes); used from the event loop."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[tuple, Kept] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple) -> Kept | None:
        kept = self._items.get(key)
        if kept is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return kept

    def put(self, key: tuple, kept: Kept) -> None:
        if len(kept.body) > self.max_bytes // 8:
            return  # one huge page must not push out everything else
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= len(old.body)
        self._items[key] = kept
        self.bytes += len(kept.body)
        while len(self._items) > self.max_entries or self.bytes > self.max_bytes:
            _, dropped = self._items.popitem(last=False)
            self.bytes -= len(dropped.body)


def _etag_matches(if_none_match: bytes, etag: bytes) -> bool:
    """Weak comparison (RFC 9110 13.1.2): `W/"x"` and `"x"` name the same representation."""
    if if_none_match.strip() == b"*":
        return True
    bare = etag.removeprefix(b"W/")
    return any(tag.strip().removeprefix(b"W/") == bare for tag in if_none_match.split(b","))


def is_anonymous(headers: dict[bytes, bytes]) -> bool:
    cookies = headers.get(b"cookie", b"")
    return b"authorization" not in headers and SESSION_COOKIE.encode() + b"=" not in cookies


class MarkReader:
    """The content mark, read from the database at most once per `interval_s` and again after
    any commit made by this process: a cached page then costs no query at all. A write made by
    another process shows after at most `interval_s`, well within the time its search index
    and matcher take to follow it."""

    def __init__(self, interval_s: float = MARK_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._mark: storage.ContentMark | None = None
        self._read_at = float("-inf")
        self._commits_seen = -1
        self.reads = 0
        self._reading: anyio.Lock | None = None

    def fresh(self) -> storage.ContentMark | None:
        """The mark when it may be used as it is, without reading (from the event loop)."""
        if (
            self._mark is not None
            and self._commits_seen == commit_count()
            and time.monotonic() - self._read_at < self.interval_s
        ):
            return self._mark
        return None

    def read(self, state) -> storage.ContentMark:
        """Read the database (in a worker thread)."""
        commits, started = commit_count(), time.monotonic()
        try:
            with Session(state.engine) as session:
                mark = storage.content_mark(session)
        except Exception as error:
            # The database is down: what was read last still describes what this process
            # serves (its index, its kept pages); asked again after an interval.
            if self._mark is None or storage.database_problem(error) is None:
                raise
            self._read_at = started
            return self._mark
        self.reads += 1
        self._mark, self._read_at, self._commits_seen = mark, started, commits
        return mark

    async def refreshed(self, state) -> storage.ContentMark:
        """The mark, read once for every request that finds it stale at the same moment: without
        this, sixteen requests arriving as it expired sent sixteen reads to the thread pool, and
        every 100 ms the event loop stalled behind them (p99 of a repeated paste was 80 ms)."""
        if self._reading is None:
            self._reading = anyio.Lock()
        async with self._reading:
            fresh = self.fresh()
            return fresh if fresh is not None else await anyio.to_thread.run_sync(self.read, state)


async def current_mark(state) -> storage.ContentMark:
    """The content mark of the runtime's one MarkReader (`state`: the app's `Runtime`)."""
    marks = state.marks
    return marks.fresh() or await marks.refreshed(state)


class KeptAnswer:
    """An answer and, once asked for, its JSON (encoded once however often it is served)."""

    __slots__ = ("_json", "answer", "made_at")

    def __init__(self, answer) -> None:
        self.answer = answer
        self._json: bytes | None = None
        self.made_at = time.monotonic()

    def json(self) -> bytes:
        if self._json is None:
            self._json = self.answer.model_dump_json().encode()
        return self._json


class AnswerCache:
    """Answers to pastes by the paste's digest and the content mark: the same error pasted
    again (a CI job failing the same way, a team hitting one bug) is answered from memory. A
    bounded LRU; used from the event loop. An answer is kept at most `max_age_s`, so that the
    answer token it carries is never much older than the answer served."""

    def __init__(self, max_entries: int = 512, max_age_s: float = 3600) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self._items: OrderedDict[tuple, KeptAnswer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    @staticmethod
    def key(text: str, mark: storage.ContentMark) -> tuple:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
        return (digest.digest(), mark)

    def get(self, key: tuple) -> KeptAnswer | None:
        kept = self._items.get(key)
        if kept is not None and time.monotonic() - kept.made_at > self.max_age_s:
            del self._items[key]
            return None
        if kept is not None:
            self._items.move_to_end(key)
        return kept

    def put(self, key: tuple, kept: KeptAnswer) -> None:
        self._items[key] = kept
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)


class ReaderCache:
    def __init__(self, app: ASGIApp, max_entries: int = MAX_ENTRIES) -> None:
        self.app = app
        self.cache = ResponseCache(max_entries)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        # The app's `Runtime` (not imported here: it holds this module's caches); None before
        # the lifespan built it.
        state = getattr(scope["app"].state, "runtime", None)
        root, path = scope.get("root_path", ""), route_path(scope)
        headers = dict(scope.get("headers") or [])
        if (
            state is None
            or not CACHED_PATHS.match(path)
            or not state.settings.public_read
            or not is_anonymous(headers)
        ):
            await self.app(scope, receive, send)
            return
        try:
            mark = await current_mark(state)
        except Exception as error:
            if storage.database_problem(error) is None:
                raise
            # No mark to key pages by while the database is down: the route answers itself
            # (search from the local index; a page that needs the database, a 503).
            await self.app(scope, receive, send)
            return
        key = (root, path, scope.get("query_string", b""), mark)
        if_none_match = headers.get(b"if-none-match")
        kept = self.cache.get(key)
        if kept is not None:
            scope["route"] = kept.route
            await self._send(send, kept, if_none_match)
            return
        await self._render_and_keep(scope, receive, send, key, mark, if_none_match)

    @staticmethod
    def _in_step(state, mark: storage.ContentMark) -> bool:
        """This process's derived caches stand at the database's feed mark (what a page shows
        of search results and matches comes from them, not from the database)."""
        applied = state.search.applied  # in memory: no file read on the event loop
        if applied is None:
            index = read_state(state.settings.index_dir)
            applied = index.mark if index is not None else None
        return (
            applied is not None
            and applied == mark.feed
            and state.search.damaged is None
            and state.matchers.mark == mark.feed
        )

    async def _send(self, send: Send, kept: Kept, if_none_match: bytes | None) -> None:
        if if_none_match is not None and _etag_matches(if_none_match, kept.etag):
            headers = [(k, v) for k, v in kept.headers if k in (b"etag", b"cache-control")]
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": kept.status, "headers": kept.headers})
        await send({"type": "http.response.body", "body": kept.body})

    async def _render_and_keep(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: tuple,
        mark: storage.ContentMark,
        if_none_match: bytes | None,
    ) -> None:
        state = scope["app"].state.runtime
        in_step_before = self._in_step(state, mark)
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            assert start is not None
            in_step = in_step_before and self._in_step(state, mark)
            route = scope.get("route")
            await self._finish(send, start, b"".join(chunks), key, in_step, if_none_match, route)

        await self.app(scope, receive, capture)

    async def _finish(
        self,
        send: Send,
        start: Message,
        body: bytes,
        key: tuple,
        keep: bool,
        if_none_match: bytes | None,
        route: object = None,
    ) -> None:
        status = start["status"]
        headers = list(start.get("headers", []))
        names = {name.lower() for name, _ in headers}
        if status != 200 or b"set-cookie" in names:
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        etag = next((v for k, v in headers if k.lower() == b"etag"), None)
        if etag is None:
            digest = hashlib.blake2b(repr((__version__, key)).encode(), digest_size=12)
            etag = b'W/"' + digest.hexdigest().encode() + b'"'
            headers.append((b"etag", etag))
        if b"cache-control" not in names:
            headers.append((b"cache-control", b"no-cache"))  # keep it, but ask each time
        kept = Kept(
            status,
            [(k, v) for k, v in headers if k.lower() not in _PER_REQUEST | {b"content-length"}]
            + [(b"content-length", str(len(body)).encode())],
            body,
            etag,
            route,
        )
        if keep:
            self.cache.put(key, kept)
        await self._send(send, kept, if_none_match)
