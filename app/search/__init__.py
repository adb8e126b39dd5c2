"""Searching the index: the one face of search for pages, API, CLI, MCP and the matcher.

Readers of the index come from a small pool, reused across requests and replaced when the index
moves. The engine behind them is Whoosh or tantivy (`PITFALLS_SEARCH_ENGINE`); both get the same
query (`app.search.query`), and everything around it is decided here once: long queries ranked
by coverage, the relaxed fallback (which never drops a filter), the relevance floor under which
a hit is only "loosely related", corrections, exact totals and facet counts of what is shown, a
sentence when the filters leave nothing, and highlights made only for the page shown (marked by
`app.search.highlight`). What a search returns is
`app.search.results`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whoosh.analysis import STOP_WORDS
from whoosh.qparser import OrGroup
from whoosh.query import And, AndNot, Every, Query, Term

from app.budget import Budget, BudgetExceeded, check_budget, current_budget, in_force
from app.errors import PitfallsError
from app.feed_mark import FeedMark
from app.search.ambiguity import ambiguity_of
from app.search.engine import Collected, EngineIndex, EngineReader
from app.search.highlight import best_sentence
from app.search.index import (
    current_generation,
    engine_name,
    load_engine,
    read_state,
    rebuild_index,
    update_index,
)
from app.search.intent import without_intent
from app.search.query import ReadQuery, has_cjk, read_query, typed_filters
from app.search.results import FilterDropped, FilterNote, SearchHit, SearchResult

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.change_feed import ChangeWatcher

__all__ = ["IndexUnavailable", "SearchHit", "SearchResult", "SearchService", "SearchTooSlow"]

# Where a snippet's sentence comes from, in order of preference on a tie; never the aliases,
# which are a list of names rather than sentences.
HIGHLIGHT_FIELDS = ("signatures", "summary", "body", "questions")
_CORRECTABLE = re.compile(r"[A-Za-z]{4,}")  # words long enough to correct
MAX_IDLE_SEARCHERS = 4
LONG_QUERY_PARTS = 4  # from this many words on, any word may match
RANK_POOL = 100  # any-word results re-ranked by coverage: the best this many by score
COVERAGE_POWER = 1.0
# The relevance floor (`_floor`): (share of the best hit's score, share of the best-covered
# hit's coverage) a hit needs to be shown; below it a hit is "loosely related", listed apart
# and not counted. Chosen on tests/data/queries (bench/questions.py: no top-1 or MRR@10 lost
# on either engine; the lowest answer ranked 2-10 there scores 0.51 of the best in English,
# 0.14 in Chinese). A Chinese query is read as overlapping bigrams, many of them noise, so
# its scores are flatter and its floor lower.
FLOOR = (0.4, 0.5)
CJK_FLOOR = (0.12, 0.08)
LOOSE_SHOWN = 10  # loosely related entries listed by title; the rest only counted
MAX_FILTERS_EXPLAINED = 4  # searches without one filter each, when the filters left nothing
MAX_QUERY_WORDS = 32  # a pasted log is searched by its first words; each word costs a matcher
_QUERY_SYNTAX = re.compile(r"[^\w\s\u3400-\u9fff]+")
logger = logging.getLogger("pitfalls")


class IndexUnavailable(PitfallsError, RuntimeError):
    """There is no usable index: not built yet, or damaged and being rebuilt."""

    status = 503

    @property
    def message(self) -> str:
        return f"Search is unavailable for a moment: {self}."


class SearchTooSlow(PitfallsError, RuntimeError):
    """A search ran past its time budget and was stopped."""

    status = 503


def _plain_words(text: str) -> str:
    """The query with its syntax removed: what a search falls back to when the syntax fails."""
    return " ".join(_QUERY_SYNTAX.sub(" ", text).lower().split())  # AND, OR, NOT: plain too


@dataclass
class _Pooled:
    """An engine's reader of one generation, used by one thread at a time."""

    generation: Path
    reader: EngineReader  # whoosh_engine.WhooshReader or tantivy_engine.TantivyReader

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.reader.close()


def _observe_seconds(seconds: float) -> None:
    """Time a search into the process's metrics, where it has them: the web app imports
    app.metrics to serve /metrics; a CLI command has none, and skips prometheus_client."""
    metrics = sys.modules.get("app.metrics")
    if metrics is not None:
        metrics.SEARCH_SECONDS.observe(seconds)


class SearchService:
    """Follows the database's change feed; readers come from a small pool, one per thread.

    Index files are read, never memory-mapped by Whoosh: a segment truncated under a running
    process is then a read error (which starts a rebuild), not a SIGBUS that kills the process.
    """

    def __init__(
        self,
        index_dir: Path,
        engine: Engine | None = None,
        check_interval_ms: int = 1000,
        budget_ms: int = 1000,
        search_engine: str | None = None,
    ) -> None:
        self.index_dir = index_dir
        self.engine = engine
        self.budget_ms = budget_ms
        self.search_engine = engine_name(search_engine)
        self._backend = load_engine(self.search_engine)
        self._watcher: ChangeWatcher | None = None
        if engine is not None:  # without one (the CLI on a current index) SQLAlchemy stays out
            from app.change_feed import ChangeWatcher

            self._watcher = ChangeWatcher(engine, check_interval_ms)
        self._lock = threading.Lock()
        self._generation: Path | None = None
        self._ix: EngineIndex | None = None
        self._idle: list[_Pooled] = []
        self._damaged: str | None = None  # why the index cannot be read, until it is rebuilt
        self._rebuilding = threading.Lock()
        self._updating = threading.Lock()
        self._applied: FeedMark | None = None  # the feed's mark the index was last seen at

    # -- keeping the searcher current ------------------------------------------------------

    def expire(self) -> None:
        """Read the change sequence on the next search (after this process wrote)."""
        if self._watcher is not None:
            self._watcher.expire()

    def catch_up(self, force: bool = False) -> None:
        """Apply database changes the index has not seen yet (throttled unless forced)."""
        if self._watcher is None or self.engine is None:  # both or neither
            return
        self._watcher.poll(force)
        mark = self._watcher.last  # perhaps read by the feed follower, now applying it
        if mark is not None and mark == self._applied:
            return
        with self._updating:  # wait for an update under way here rather than search stale
            state = read_state(self.index_dir, self.search_engine)
            if state is None or mark != state.mark:
                state = update_index(self.engine, self.index_dir, self.search_engine)
            self._applied = state.mark

    @property
    def applied(self) -> FeedMark | None:
        """The feed's mark this process last saw its index at (None before its first search):
        kept in memory, so asking costs no read of the index's state file."""
        return self._applied

    @property
    def damaged(self) -> str | None:
        """Why the index cannot be read right now (a rebuild is under way), or None."""
        return self._damaged

    def _acquire(self) -> _Pooled:
        generation = current_generation(self.index_dir)
        if generation is None:
            raise IndexUnavailable("the search index is not built yet: run `pitfalls reindex`")
        with self._lock:
            if generation != self._generation or self._ix is None:
                self._close_all()
                self._ix = self._backend.open_index(generation)
                self._generation = generation
            while self._idle:
                pooled = self._idle.pop()
                if pooled.reader.up_to_date():
                    return pooled
                pooled.close()
            ix = self._ix
        return _Pooled(generation, ix.reader())

    def _release(self, pooled: _Pooled, healthy: bool = True) -> None:
        with self._lock:
            usable = healthy and pooled.generation == self._generation
            if usable and len(self._idle) < MAX_IDLE_SEARCHERS:
                self._idle.append(pooled)
                return
        pooled.close()

    def _close_all(self) -> None:
        for pooled in self._idle:
            pooled.close()
        self._idle = []
        if self._ix is not None:
            self._ix.close()
        self._ix = None

    def close(self) -> None:
        with self._lock:
            self._close_all()

    def __del__(self) -> None:
        # Index files are plain open files (no mmap): a forgotten service must not leak them.
        with contextlib.suppress(Exception):
            self._close_all()

    def _heal(self, error: Exception) -> None:
        """The index could not be read: rebuild it aside from the database, then swap it in."""
        self._damaged = f"the search index could not be read ({type(error).__name__}); rebuilding"
        logger.error("search index unreadable, rebuilding it: %r", error)
        engine = self.engine
        if engine is None or not self._rebuilding.acquire(blocking=False):
            return

        def rebuild() -> None:
            try:
                rebuild_index(engine, self.index_dir, search_engine=self.search_engine)
                with self._lock:
                    self._close_all()
                self._damaged = None
                logger.info("search index rebuilt")
            except Exception:
                logger.exception("rebuilding the search index failed")
            finally:
                self._rebuilding.release()

        threading.Thread(target=rebuild, name="pitfalls-reindex", daemon=True).start()

    # -- searching -------------------------------------------------------------------------

    def _parse(self, reader: EngineReader, read: ReadQuery, any_part: bool) -> Query:
        return reader.bound(reader.query_builder().build(read, any_part=any_part))

    def _facets(self, reader: EngineReader, collected: Collected) -> dict[str, dict[str, int]]:
        facets = {}
        for name, counts in reader.facets(collected).items():
            facets[name] = dict(
                sorted(((k, n) for k, n in counts.items() if n), key=lambda kv: (-kv[1], kv[0]))
            )
        return facets

    def _suggest(self, reader: EngineReader, text: str, read: ReadQuery) -> str | None:
        """`text` with its misspelt plain words corrected; field names, excluded words and
        phrases are left as typed."""
        suggestion, changed = text, False
        for word in dict.fromkeys(w for w in read.words if _CORRECTABLE.fullmatch(w)):
            check_budget()
            lowered = word.lower()
            if reader.known_word(lowered):
                continue
            found = reader.correction(lowered)
            if found:
                suggestion = re.sub(rf"(?<![\w:\"-]){re.escape(word)}\b", found, suggestion)
                changed = True
        return suggestion if changed else None

    def _highlight(self, hit: dict, needles: dict[str, tuple[str, ...]], cjk: bool) -> str:
        """The sentence of the hit's text that holds most of the query's terms, marked; in the
        query's script where the hit has one; never from the alias list (`best_sentence`).

        Needles are index terms: words, identifiers, stems and CJK bigrams, all substrings (a
        stem with its last letter changed aside) of the words they come from, so the text is
        searched for them with `str.find`, never analyzed (`mark_terms`).
        """
        fields = [(hit.get(name) or "", needles.get(name, ())) for name in HIGHLIGHT_FIELDS]
        return best_sentence(fields, cjk)

    def search(
        self,
        text: str,
        *,
        kind: str | None = None,
        tag: str | None = None,
        page: int = 1,
        limit: int = 20,
        highlights: bool = True,
        facets: bool = True,
        correct: bool = True,
    ) -> SearchResult:
        """Entries for `text`, best first, one page of them, with facet counts and a suggestion.

        A query that finds nothing, or only some of its words, while a spelling correction
        finds more, returns the corrected query's results (`corrected_from` holds what was
        typed) unless `correct` is false. Within the search budget (`SearchTooSlow` past it);
        an index that cannot be read is rebuilt (`IndexUnavailable` until then). The query
        language is `app.search.query`'s: reading a query never fails.
        """
        self.catch_up()
        if self._damaged:
            raise IndexUnavailable(self._damaged)
        text = " ".join(text.split()[:MAX_QUERY_WORDS])
        page = max(1, page)
        budget = Budget(self.budget_ms / 1000).within(current_budget())
        started = time.perf_counter()
        try:
            pooled = self._acquire()
        except IndexUnavailable:
            raise
        except Exception as error:
            self._heal(error)
            raise IndexUnavailable(self._damaged or "the search index is being rebuilt") from None
        healthy = True
        try:
            with in_force(budget):
                args = (pooled.reader, kind, tag, page, limit, highlights, facets, correct)
                try:
                    return self._search(text, *args)
                except BudgetExceeded:
                    raise
                except Exception:
                    pass  # the query's syntax failed (or the index did): try plain words
                try:
                    result = self._search(_plain_words(text), *args)
                    result.query = text
                    return result
                except BudgetExceeded:
                    raise
                except Exception as error:
                    healthy = False
                    self._heal(error)
                    raise IndexUnavailable(self._damaged or "rebuilding") from None
        except BudgetExceeded:
            raise SearchTooSlow(
                f"The search took longer than {self.budget_ms} ms and was stopped; "
                "use fewer wildcards or more specific words."
            ) from None
        finally:
            self._release(pooled, healthy)
            _observe_seconds(time.perf_counter() - started)

    def _search(
        self,
        text: str,
        reader: EngineReader,
        kind: str | None,
        tag: str | None,
        page: int,
        limit: int,
        highlights: bool,
        facets: bool,
        correct: bool = True,
        explain: bool = True,
    ) -> SearchResult:
        filters = self._param_filters(kind, tag)
        # "how to", "why", "怎么办": what the reader asks, not what an entry must hold.
        read = read_query(without_intent(text))
        texts = read.text_parts()
        # A long query is rarely all in one entry: any of its words may match, and entries
        # with more of its rarer words come first (`_rank_by_coverage`). Field parts stay
        # filters either way (`QueryBuilder.build`).
        long_query = len(texts) >= LONG_QUERY_PARTS
        query = self._parse(reader, read, any_part=long_query) if read.parts else Every()
        relaxed = False
        # Any-word results are ranked from a pool deep enough to find where relevance ends.
        pool = max(page * limit, RANK_POOL)
        collected = self._collect(reader, query, filters, pool if long_query else page * limit)
        if not collected.total and texts and not long_query:
            relaxed_query = self._parse(reader, read, any_part=True)
            if relaxed_query != query:
                query, relaxed = relaxed_query, True
                collected = self._collect(reader, query, filters, pool)
        ranked = collected.ranked
        coverage: dict[Any, float] | None = None
        if long_query or relaxed:
            ranked, coverage = self._rank_by_coverage(reader, read, ranked)
        suggestion = self._suggest(reader, text, read) if read.words else None
        if suggestion and correct and (relaxed or not collected.total):
            # A typo: the corrected query's results at once, when they are better.
            args = (reader, kind, tag, page, limit, highlights, facets)
            better = self._search(suggestion, *args, correct=False, explain=explain)
            if better.total and (not collected.total or not better.relaxed):
                better.corrected_from = text
                better.suggestion = None
                return better
        shown, total = ranked, collected.total
        loose: list[tuple[float, Any]] = []
        if coverage is not None:  # hits that may lack words; an all-words hit has them all
            floor = CJK_FLOOR if any(has_cjk(p.text) for p in texts) else FLOOR
            shown, loose, total = self._floor(ranked, coverage, collected.total, floor)
        result = SearchResult(query=text, total=total, page=page, limit=limit, hits=[])
        result.hits = self._page(reader, shown, query, page, limit, highlights)
        if page == 1:
            result.ambiguous = ambiguity_of(result.hits, any(has_cjk(p.text) for p in texts))
        result.loose_total = collected.total - total
        result.loose = self._page(reader, loose, query, 1, LOOSE_SHOWN, False)
        if facets:
            narrowed = reader.narrow(collected, [d for _, d in shown]) if loose else collected
            result.facets = self._facets(reader, narrowed)
        result.relaxed = relaxed
        result.suggestion = suggestion
        if not total and explain and (filters or typed_filters(text)):
            result.filter_note = self._explain_filters(reader, text, read, kind, tag)
        return result

    def _param_filters(self, kind: str | None, tag: str | None) -> list[Query]:
        filters: list[Query] = [Term("kind", kind)] if kind else []
        if tag:
            filters.append(Term("tags", tag.lower()))
        return filters

    def _floor(
        self,
        ranked: list[tuple[float, Any]],
        coverage: dict[Any, float],
        total: int,
        floor: tuple[float, float],
    ) -> tuple[list[tuple[float, Any]], list[tuple[float, Any]], int]:
        """(shown, loosely related, how many are shown) of any-word results: an entry is
        shown when it scores at least floor[0] of the best hit's score and covers at least
        floor[1] of what the best-covered hit covers of the query's weight
        (`_rank_by_coverage`). The best hit is always shown. When every ranked hit passes and
        more matched than were ranked, the floor is out of reach: all are shown.

        Results that hold every word are not floored: each holds all the reader typed, and
        where every entry has the words (tantivy's idf is then near 0) the scores are noise."""
        if not ranked:
            return ranked, [], total
        score_floor, coverage_floor = floor
        lowest = score_floor * ranked[0][0]
        best_covered = max(coverage.values(), default=0.0)
        shown: list[tuple[float, Any]] = []
        loose: list[tuple[float, Any]] = []
        for item in ranked:
            covered = coverage.get(item[1], 0.0)
            passes = item[0] >= lowest and covered >= coverage_floor * best_covered
            (shown if passes or not shown else loose).append(item)
        if not loose and total > len(ranked):
            return ranked, [], total
        return shown, loose, len(shown)

    def _explain_filters(
        self, reader: EngineReader, text: str, read: ReadQuery, kind: str | None, tag: str | None
    ) -> FilterNote:
        """Which of the query's filters left nothing, and what each search without one finds."""
        builder = reader.query_builder()
        typed = typed_filters(text)
        alone = [(label, reader.bound(builder.build(read_query(label)))) for label, _ in typed]
        params = [(f"kind:{kind}", Term("kind", kind))] if kind else []
        if tag:
            params.append((f"tag:{tag}", Term("tags", tag.lower())))
        checks = alone + params
        empty = [label for label, query in checks if not reader.collect(query, 1).total]
        if empty:
            message = f"No entry has {' or '.join(empty)}."
        elif len(checks) > 1 and not reader.collect(And([q for _, q in checks]), 1).total:
            message = f"No entry has {' and '.join(label for label, _ in checks)} together."
        else:
            rest = read.plain() or text
            together = " and ".join(label for label, _ in checks)
            message = f"No entry with {together} matches “{rest}”."
        without = []
        options = [(label, rest, kind, tag) for label, rest in typed]
        if kind:
            options.append((f"kind:{kind}", text, None, tag))
        if tag:
            options.append((f"tag:{tag}", text, kind, None))
        for label, rest, kind_left, tag_left in options[:MAX_FILTERS_EXPLAINED]:
            found = self._search(
                rest, reader, kind_left, tag_left, 1, 1, False, False, correct=False, explain=False
            )
            without.append(FilterDropped(label, rest, kind_left, tag_left, found.total))
        return FilterNote(message, without)

    def _collect(
        self, reader: EngineReader, query: Query, filters: list[Query], limit: int
    ) -> Collected:
        return reader.collect(And([query, *filters]) if filters else query, limit)

    def _rank_by_coverage(
        self, reader: EngineReader, read: ReadQuery, ranked: list[tuple[float, Any]]
    ) -> tuple[list[tuple[float, Any]], dict[Any, float]]:
        """Re-rank any-word results: the score times the share of the query's weight the entry
        covers (each part weighs its inverse document frequency), so an entry with most of
        the rare words comes before one with a few common words many times. Also returns
        each entry's share. Filters (every hit has them) and words no entry has (no hit can)
        weigh nothing."""
        builder = reader.query_builder()
        total_docs = max(1, reader.doc_count())
        among = [doc for _score, doc in ranked]
        parts = []
        for part in read.text_parts():
            check_budget()
            count, docs = reader.part_documents(reader.bound(builder.part(part, OrGroup)), among)
            if count:
                parts.append((math.log(1 + total_docs / (1 + count)), docs))
        weight = sum(w for w, _ in parts) or 1.0
        rescored = []
        coverage = {}
        for score, doc in ranked:
            covered = coverage[doc] = sum(w for w, docs in parts if doc in docs) / weight
            rescored.append((score * covered**COVERAGE_POWER, doc))
        rescored.sort(key=lambda item: -item[0])
        return rescored, coverage

    def _page(
        self,
        reader: EngineReader,
        ranked: list[tuple[float, Any]],
        query: Query,
        page: int,
        limit: int,
        highlights: bool,
    ) -> list[SearchHit]:
        needles: dict[str, tuple[str, ...]] = {}
        if isinstance(query, AndNot):
            query = query.a  # excluded words are never highlighted
        if highlights:
            for fieldname, term in query.iter_all_terms():
                if isinstance(term, bytes):
                    term = term.decode("utf-8")
                if str(term) in STOP_WORDS:
                    continue
                needles.setdefault(fieldname, ())
                needles[fieldname] += (str(term),)
        cjk = any(has_cjk(term) for terms in needles.values() for term in terms)
        hits = []
        for score, doc in ranked[(page - 1) * limit : page * limit]:
            stored = reader.stored(doc)
            hits.append(
                SearchHit(
                    id=stored["id"],
                    title=stored["title"],
                    summary=stored["summary"],
                    kind=stored["kind"],
                    tags=[t for t in stored.get("tags", "").split(",") if t],
                    score=round(float(score or 0.0), 4),
                    highlights=self._highlight(stored, needles, cjk) if highlights else "",
                )
            )
        return hits
