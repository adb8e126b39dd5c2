"""Searching the index: one searcher reused across requests and refreshed when the index moves.

Facet counts come from per-term document sets cached for the life of a searcher, so counting
never scores every hit; highlights are made only for the page shown.
"""

import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlalchemy import Engine
from whoosh import index as whoosh_index
from whoosh.collectors import TopCollector
from whoosh.highlight import ContextFragmenter, HtmlFormatter, highlight
from whoosh.qparser import AndGroup, MultifieldParser, OrGroup
from whoosh.query import And, Every, Query, Term
from whoosh.searching import Searcher

from app.analysis import stem_word
from app.change_feed import ChangeWatcher
from app.entry_details import entry_url
from app.search_index import (
    FIELD_BOOSTS,
    SEARCH_FIELDS,
    current_generation,
    read_state,
    update_index,
)

FACET_FIELDS = {"kind": "kind", "tag": "tags"}
HIGHLIGHT_FIELDS = ("signatures", "summary", "body", "aliases")
STEMMED_FIELDS = ("title", "summary", "body")
HIGHLIGHT_WINDOW = 600  # characters analyzed for a highlight, around the first match
_QUERY_WORD = re.compile(r"[A-Za-z]{4,}")  # words long enough to correct


@dataclass(frozen=True)
class SearchHit:
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    score: float
    highlights: str  # HTML: escaped text with <mark> around the matched terms


@dataclass
class SearchResult:
    query: str
    total: int
    page: int
    limit: int
    hits: list[SearchHit]
    facets: dict[str, dict[str, int]] = field(default_factory=dict)
    suggestion: str | None = None
    relaxed: bool = False  # no entry had every word, so entries with any of them are shown

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.limit))

    def to_dict(self) -> dict:
        """The JSON shape shared by `/api/v1/search` and `pitfalls search --json`."""
        return {
            "query": self.query,
            "total": self.total,
            "page": self.page,
            "pages": self.pages,
            "limit": self.limit,
            "hits": [{**asdict(hit), "url": entry_url(hit.id)} for hit in self.hits],
            "facets": self.facets,
            "suggestion": self.suggestion,
            "relaxed": self.relaxed,
        }


class _TopAndAllCollector(TopCollector):
    """Top-N scoring that also keeps every matched document number, in one pass.

    Whoosh otherwise builds the (costly) multi-field matcher twice: once to score the page and
    once more to count the total and the facets.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit, usequality=False)

    def _collect(self, global_docnum: int, score: float):
        self.docset.add(global_docnum)
        return super()._collect(global_docnum, score)


class IndexUnavailable(RuntimeError):
    """There is no built index yet (run `pitfalls reindex`)."""


class SearchService:
    """Owns one Whoosh searcher per process; thread-safe; follows the database's change feed."""

    def __init__(
        self, index_dir: Path, engine: Engine | None = None, check_interval_ms: int = 1000
    ) -> None:
        self.index_dir = index_dir
        self.engine = engine
        self._watcher = ChangeWatcher(engine, check_interval_ms) if engine is not None else None
        self._lock = threading.RLock()
        self._generation: Path | None = None
        self._ix = None
        self._searcher: Searcher | None = None
        self._facet_sets: dict[str, dict[str, frozenset[int]]] = {}
        formatter = HtmlFormatter(tagname="mark", between=" … ")
        self._formatter = formatter
        self._fragmenter = ContextFragmenter(maxchars=180, surround=50)

    # -- keeping the searcher current ------------------------------------------------------

    def expire(self) -> None:
        """Read the change sequence on the next search (after this process wrote)."""
        if self._watcher is not None:
            self._watcher.expire()

    def catch_up(self, force: bool = False) -> None:
        """Apply database changes the index has not seen yet (throttled unless forced)."""
        if self._watcher is None:
            return
        db_seq = self._watcher.poll(force)
        if db_seq is None:
            return
        state = read_state(self.index_dir)
        if state is None or db_seq > state.seq:
            update_index(self.engine, self.index_dir)

    def _current_searcher(self) -> Searcher:
        generation = current_generation(self.index_dir)
        if generation is None:
            raise IndexUnavailable("the search index is not built yet: run `pitfalls reindex`")
        if generation != self._generation or self._searcher is None:
            self._close_searcher()
            self._ix = whoosh_index.open_dir(str(generation))
            self._searcher = self._ix.searcher()
            self._generation = generation
            self._facet_sets = {}
        elif not self._searcher.up_to_date():
            # Not Searcher.refresh(): it reuses segment readers with their old deletion sets,
            # so an entry deleted by a deletion-only commit would still be found.
            self._searcher.close()
            self._searcher = self._ix.searcher()
            self._facet_sets = {}
        return self._searcher

    def _close_searcher(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
        if self._ix is not None:
            self._ix.close()
        self._searcher = self._ix = None

    def close(self) -> None:
        with self._lock:
            self._close_searcher()

    # -- searching -------------------------------------------------------------------------

    def _parse(self, searcher: Searcher, text: str, group) -> Query:
        parser = MultifieldParser(
            list(SEARCH_FIELDS), searcher.schema, fieldboosts=FIELD_BOOSTS, group=group
        )
        return parser.parse(text)

    def _facet_set(self, searcher: Searcher, fieldname: str) -> dict[str, frozenset[int]]:
        cached = self._facet_sets.get(fieldname)
        if cached is None:
            reader = searcher.reader()
            cached = {
                term.decode("utf-8"): frozenset(reader.postings(fieldname, term).all_ids())
                for term in reader.lexicon(fieldname)
            }
            self._facet_sets[fieldname] = cached
        return cached

    def _facets(self, searcher: Searcher, matched: set[int]) -> dict[str, dict[str, int]]:
        facets = {}
        for name, fieldname in FACET_FIELDS.items():
            counts = {
                value: len(docs & matched)
                for value, docs in self._facet_set(searcher, fieldname).items()
            }
            facets[name] = dict(
                sorted(((k, n) for k, n in counts.items() if n), key=lambda kv: (-kv[1], kv[0]))
            )
        return facets

    def _suggest(self, searcher: Searcher, text: str) -> str | None:
        reader = searcher.reader()
        suggestion, changed = text, False
        for word in set(_QUERY_WORD.findall(text)):
            lowered = word.lower()
            if ("spell", lowered) in reader or any(
                (fieldname, stem_word(lowered)) in reader for fieldname in STEMMED_FIELDS
            ):
                continue
            found = searcher.suggest("spell", lowered, limit=1, maxdist=2, prefix=1)
            if found:
                suggestion = re.sub(rf"\b{re.escape(word)}\b", found[0], suggestion)
                changed = True
        return suggestion if changed else None

    def _highlight(self, hit, needles: dict[str, tuple[str, ...]], schema) -> str:
        """The first field that contains a query term, highlighted around its first occurrence.

        Stems and bigrams are substrings of the words they come from, so a plain substring
        search finds where to look; only a window of the text there is analyzed.
        """
        for fieldname in HIGHLIGHT_FIELDS:
            text = hit.get(fieldname)
            words = needles.get(fieldname)
            if not text or not words:
                continue
            lowered = text.lower()
            found = [at for at in (lowered.find(word) for word in words) if at >= 0]
            if not found:
                continue
            start = max(0, min(found) - HIGHLIGHT_WINDOW // 3)
            start = text.rfind(" ", 0, start) + 1 if start else 0
            window = text[start : start + HIGHLIGHT_WINDOW]
            fragment = highlight(
                window,
                frozenset(words),
                schema[fieldname].analyzer,
                self._fragmenter,
                self._formatter,
                top=2,
            )
            if fragment:
                return fragment
        return ""

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
    ) -> SearchResult:
        """Entries for `text`, best first, one page of them, with facet counts and a suggestion."""
        self.catch_up()
        text = text.strip()
        page = max(1, page)
        with self._lock:
            searcher = self._current_searcher()
            filters = [Term("kind", kind)] if kind else []
            if tag:
                filters.append(Term("tags", tag.lower()))
            query = self._parse(searcher, text, AndGroup) if text else Every()
            relaxed = False
            collector = self._collect(searcher, query, filters, page * limit)
            if not collector.docset and text:
                relaxed_query = self._parse(searcher, text, OrGroup)
                if relaxed_query != query:
                    query, relaxed = relaxed_query, True
                    collector = self._collect(searcher, query, filters, page * limit)
            matched = collector.docset
            result = SearchResult(query=text, total=len(matched), page=page, limit=limit, hits=[])
            result.hits = self._page(collector, query, page, limit, highlights)
            if facets:
                result.facets = self._facets(searcher, matched)
            result.relaxed = relaxed
            if text:
                result.suggestion = self._suggest(searcher, text)
        return result

    def _collect(
        self, searcher: Searcher, query: Query, filters: list[Query], limit: int
    ) -> _TopAndAllCollector:
        collector = _TopAndAllCollector(limit)
        searcher.search_with_collector(And([query, *filters]) if filters else query, collector)
        return collector

    def _page(
        self, collector: _TopAndAllCollector, query: Query, page: int, limit: int, highlights: bool
    ) -> list[SearchHit]:
        results = collector.results()
        schema = results.searcher.schema
        needles: dict[str, tuple[str, ...]] = {}
        if highlights:
            for fieldname, term in query.iter_all_terms():
                if isinstance(term, bytes):
                    term = term.decode("utf-8")
                needles.setdefault(fieldname, ())
                needles[fieldname] += (str(term),)
        hits = []
        for hit in results[(page - 1) * limit : page * limit]:
            stored = hit.fields()
            hits.append(
                SearchHit(
                    id=stored["id"],
                    title=stored["title"],
                    summary=stored["summary"],
                    kind=stored["kind"],
                    tags=[t for t in stored.get("tags", "").split(",") if t],
                    score=round(float(hit.score or 0.0), 4),
                    highlights=self._highlight(hit, needles, schema) if highlights else "",
                )
            )
        return hits
