"""The answer to a pasted traceback: what was read, the known pitfalls that match, and why.

`answer_paste` is the one function behind the /match page, `POST /api/v1/match` and
`pitfalls match`; they differ only in how they show its result. Pasted text is never stored.
"""

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.answer_assembly import (
    EntryParts,
    assemble_answer,
    foreign_library,
    parsed_out,
)
from app.answer_shapes import Answer, OutcomeStats, SnippetOut
from app.answer_tokens import AnswerSigner
from app.change_feed import ChangeWatcher
from app.matching.paste_matcher import PasteMatcher
from app.metrics import MATCH_SECONDS
from app.outcomes import stats as outcome_stats
from app.rendering import markdown_section, render_body
from app.tracebacks import ParsedPaste, parse_traceback

if TYPE_CHECKING:  # app.search loads the index's engines: the CLI's `match` needs none of it
    from app.search.results import SearchHit, SearchResult

# Kept importable from here: the shapes and helpers that lived in this module.
_parsed_out = parsed_out
__all__ = [
    "Answer",
    "EntryParts",
    "MatcherCache",
    "answer_paste",
    "answer_query",
    "entry_parts",
    "foreign_library",
    "search_answer",
    "search_with_matches",
]


# The matcher this process built last, whichever cache built it: a new cache's first build
# starts from it, so a second app in one process (tests make hundreds) tokenizes only the
# entries that differ. In a server it is the current matcher itself: it costs nothing more.
_last_built: PasteMatcher | None = None


class MatcherCache:
    """One compiled matcher (both tiers) per process, brought up to date when the change feed
    moves: from the entries the new changes name alone (`PasteMatcher.updated`), or rebuilt
    whole when the feed cannot say what changed (the first build, a count that does not add up).

    A request never waits for another thread's build: it answers with the matcher there is,
    whose `mark` says which change it reflects. Only a caller that has already seen a newer mark
    (`at_least`: its own write, or the mark an answer will be kept under) waits, for a build
    that costs what the change costs."""

    # How long a caller that saw a newer mark waits for a build under way elsewhere.
    WAIT_S = 1.0

    def __init__(self, engine: Engine, check_interval_ms: int = 1000) -> None:
        self.engine = engine
        self._watcher = ChangeWatcher(engine, check_interval_ms)
        self._matcher: PasteMatcher | None = None
        self._mark: storage.FeedMark | None = None
        self._lock = threading.Lock()
        self.full_builds = 0  # every entry read and indexed
        self.updates = 0  # only the changed entries read
        self.entries_read = 0  # entries read from the database, over all builds

    def expire(self) -> None:
        self._watcher.expire()

    @property
    def mark(self) -> storage.FeedMark | None:
        """The feed's mark the current matcher was built at."""
        return self._mark

    def _up_to_date(self) -> bool:
        last, mark = self._watcher.last, self._mark
        return (
            self._matcher is not None
            and last is not None
            and mark is not None
            and (last.seq, last.count) <= (mark.seq, mark.count)
        )

    def current(self, at_least: storage.FeedMark | None = None) -> PasteMatcher:
        """The matcher; `at_least`: a feed mark the caller has already seen, so the feed is
        read now rather than after the interval when this matcher is older than that, and a
        build under way is waited for (at most `WAIT_S`)."""
        behind = at_least is not None and (
            self._mark is None
            or (self._mark.seq, self._mark.count) < (at_least.seq, at_least.count)
        )
        self._watcher.poll(force=self._matcher is None or behind)
        matcher = self._matcher
        if matcher is not None and self._up_to_date():
            return matcher
        if matcher is None:
            self._lock.acquire()
        elif not self._lock.acquire(timeout=self.WAIT_S if behind else 0):
            return matcher  # another thread is building the next one
        try:
            mark = self._watcher.last
            if self._matcher is None or (mark is not None and not self._up_to_date()):
                try:
                    self._advance(mark)
                except Exception as error:
                    # The database went away between the mark and the read: answer with what
                    # this process has (it says so through health) rather than not at all.
                    if self._matcher is None or storage.database_problem(error) is None:
                        raise
        finally:
            self._lock.release()
        assert self._matcher is not None
        return self._matcher

    def _advance(self, mark: storage.FeedMark | None) -> None:
        """Bring the matcher to `mark` (under the lock)."""
        global _last_built
        old, previous = self._mark, self._matcher
        with Session(self.engine) as session:
            matcher = None
            if previous is not None and old is not None and mark is not None:
                ids, changes = storage.changed_entry_ids(
                    session, after_seq=old.seq, upto_seq=mark.seq
                )
                # Every change between the marks is one of those rows: then they name every
                # entry that differs (otherwise rows were removed, or numbers were reused).
                if changes == mark.count - old.count:
                    records = storage.signature_records_of(session, ids)
                    texts = storage.entry_texts_of(session, ids, records)
                    matcher = previous.updated(ids, records, texts)
                    self.updates += 1
                    self.entries_read += len(texts)
            if matcher is None:
                # In Python's order of ids, whatever the database's collation: what `updated`
                # keeps, and places a new entry by.
                texts = sorted(storage.active_entry_texts(session), key=lambda t: t.entry_id)
                records = sorted(
                    storage.active_signature_records(session),
                    key=lambda r: (r.entry_id, r.position),
                )
                # Only what changed is compiled and read again.
                matcher = PasteMatcher.build(records, texts, previous=previous or _last_built)
                self.full_builds += 1
                self.entries_read += len(texts)
        # the first match builds the DFA lazily, and reads the memory tier's pastes (once per
        # process): here, not inside the first unmatched paste's time budget
        matcher.signatures.match_message("warm up the DFA")
        if matcher.uses_memory:
            _ = matcher.memory
        matcher.mark = mark
        self._matcher, self._mark = matcher, mark
        _last_built = matcher


class EntryPartsCache:
    """An answer's parts that depend on the entry's text alone, made once per text.

    Keyed by the entry's id and the hash of its whole Markdown (its snippets' line numbers count
    the front-matter), so a new revision is a new key and no database can be served another's
    parts; rendering the Fix with Pygments was half of what a paste cost. Bounded (LRU).
    """

    def __init__(self, max_entries: int = 2048) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str], EntryParts] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, session: Session, entry) -> EntryParts:
        key = (entry.id, entry.content_hash)
        with self._lock:
            parts = self._items.get(key)
            if parts is not None:
                self._items.move_to_end(key)
                return parts
        fix = markdown_section(entry.body_markdown, "Fix")
        snippets = storage.entry_snippets(session, entry_id=entry.id)
        parts = EntryParts(
            fix, render_body(fix).html if fix else "", tuple(SnippetOut.of(s) for s in snippets)
        )
        with self._lock:
            self._items[key] = parts
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)
        return parts


entry_parts = EntryPartsCache()


class _SessionReads:
    """An answer's reads of the entries, from the database."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def entries(self, entry_ids):
        return storage.get_entries(self.session, entry_ids=list(entry_ids))

    def parts(self, entry) -> EntryParts:
        return entry_parts.get(self.session, entry)

    def outcomes(self, entry_id: str, fingerprint: str | None) -> OutcomeStats:
        return outcome_stats(self.session, entry_id, fingerprint=fingerprint)


def answer_paste(
    text: str,
    *,
    engine: Engine,
    matcher: PasteMatcher,
    parsed: ParsedPaste | None = None,
    signer: AnswerSigner | None = None,
) -> Answer:
    """`parsed`, when the caller has already read `text`, saves reading it twice; `signer`
    gives an answer with matches the token that outcome reports on it must send back."""
    with MATCH_SECONDS.time():
        parsed = parsed if parsed is not None else parse_traceback(text)
        result = matcher.match(parsed)
    with Session(engine) as session:
        answer = assemble_answer(text, parsed, result, _SessionReads(session), signer)
    if isinstance(matcher.mark, storage.FeedMark):
        answer.change = matcher.mark.seq
    return answer


def answer_query(text: str, *, engine: Engine, matcher: PasteMatcher) -> Answer | None:
    """The answer to a search query that holds error text, or None for words: the search box
    and the search API put these matches first. Error text is an exception or a warning line
    (`RuntimeError: CUDA error: …`, also inside a sentence), or, where that finds nothing, a
    long enough run of an entry's error message among other words, Chinese ones too
    (`Expected all tensors to be on the same device 怎么解决`: `match_fragments`)."""
    if not text.strip():
        return None
    parsed = parse_traceback(text)
    answer = None
    if parsed.exceptions or parsed.warnings:
        answer = answer_paste(text, engine=engine, matcher=matcher, parsed=parsed)
        if answer.matches:
            return answer
    with MATCH_SECONDS.time():
        fragments = matcher.match_fragments(text)
    if not fragments.matches:
        return answer
    with Session(engine) as session:
        return assemble_answer(text, parsed, fragments, _SessionReads(session))


MATCH_TIE = 0.06  # matches this close in confidence fit the error alike: shown as ambiguous


def search_answer(
    service, query: str, *, engine: Engine, matcher: PasteMatcher, **options
) -> "tuple[SearchResult, Answer | None]":
    """A search, and the answer to the error text in it: the search page's, the search API's
    and the MCP tool's one function. On the first page the matched entries come first among
    the hits, best match first (entries that break a `kind` or `tag` filter excepted); when
    two or three matches fit alike, they are the result's `ambiguous` group, and when one
    match stands out, the query is not ambiguous whatever the scores say."""
    from app.search.ambiguity import MAX_GROUP, among
    from app.search.query import typed_filters

    result = service.search(query, **options)
    if options.get("page", 1) != 1:
        return result, None
    answer = answer_query(query, engine=engine, matcher=matcher)
    if answer is None or not answer.matches:
        return result, answer
    kind, tag = options.get("kind"), options.get("tag")
    with Session(engine) as session:
        entries = storage.get_entries(session, entry_ids=[m.id for m in answer.matches])
    by_id = {hit.id: hit for hit in [*result.hits, *result.loose]}
    first: list[SearchHit] = []
    for match in answer.matches:
        entry = entries.get(match.id)
        if entry is None or (kind and entry.kind != kind) or (tag and tag not in entry.tags):
            continue
        if typed_filters(query) and match.id not in by_id:
            continue  # a field part is a filter: only what the search itself found
        first.append(by_id.get(match.id) or _hit_of(match, list(entry.tags)))
    if not first:
        return result, answer
    # Matches that fit alike (a message several entries print) in the order the words found
    # them: the rest of the query says more about which one it is than a tie does.
    confidence = {m.id: m.confidence for m in answer.matches}
    best = confidence[first[0].id]
    rank = {hit.id: i for i, hit in enumerate(result.hits)}
    tied = sorted(
        (hit for hit in first if confidence[hit.id] >= best - MATCH_TIE),
        key=lambda hit: rank.get(hit.id, len(rank)),
    )
    first = tied + [hit for hit in first if hit not in tied]
    moved = {hit.id for hit in first}
    added = sum(1 for hit in first if hit.id not in rank)
    result.hits = (first + [h for h in result.hits if h.id not in moved])[: result.limit]
    result.loose_total -= sum(1 for hit in result.loose if hit.id in moved)
    result.loose = [h for h in result.loose if h.id not in moved]
    result.total += added
    result.ambiguous = among(tied[:MAX_GROUP]) if len(tied) > 1 else None
    return result, answer


def _hit_of(match, tags: list[str]) -> "SearchHit":
    """A matched entry that the words of the query did not find, as a hit."""
    from app.search.results import SearchHit

    return SearchHit(
        id=match.id,
        title=match.title,
        summary=match.summary,
        kind=match.kind,
        tags=tags,
        score=0.0,
        highlights="",
    )


def search_with_matches(
    service, query: str, *, engine: Engine, matcher: PasteMatcher, **options
) -> dict:
    """A search's JSON (`SearchResult.to_dict`) with `matches`: the known and likely entries of
    error text in the query, best first (empty for plain words), which also lead its hits
    (`search_answer`). Shared by the search API and the MCP tool, so an agent gets what a
    reader's page shows first."""
    result, answer = search_answer(service, query, engine=engine, matcher=matcher, **options)
    body = result.to_dict()
    body["matches"] = [m.model_dump(mode="json") for m in answer.matches] if answer else []
    return body
