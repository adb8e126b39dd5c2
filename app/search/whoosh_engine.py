"""The Whoosh engine: writes a generation's files and answers the search service's questions.

The query itself is built by `app.search.query` (a Whoosh query tree, which the tantivy engine
translates); here it is bounded, run, counted and faceted. Collecting visits every match (no
matcher replacement), so totals and facet counts are exact at any size. Incremental updates
leave small segments (each a matcher more to set up per query term); once there are more than
MERGE_SEGMENTS, they are all merged into one in a background thread, off the request path. An
update arriving meanwhile finds the writer busy and is applied by the next catch-up.
"""

import logging
import re
import threading
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from whoosh.collectors import TopCollector
from whoosh.fields import ID, KEYWORD, STORED, TEXT, Schema
from whoosh.filedb.filestore import FileStorage
from whoosh.index import LockError
from whoosh.query import MultiTerm, NullQuery, Or, Prefix, Query, Term, Wildcard
from whoosh.searching import Searcher

from app.budget import check_budget
from app.search.analysis import code_analyzer, prose_analyzer, spelling_analyzer, stem_word
from app.search.engine import FIELD_BOOSTS, SEARCH_FIELDS
from app.search.query import QueryBuilder

FACET_FIELDS = {"kind": "kind", "tag": "tags"}
STEMMED_FIELDS = ("title", "summary", "body", "questions")
# Wildcards and ranges become at most this many terms each, and a wildcard needs this many
# literal characters before its first * or ?: `a*` alone would be most of the lexicon.
MAX_TERM_EXPANSION = 64
MIN_WILDCARD_PREFIX = 2
MAX_MULTI_TERMS = 8  # per query; further wildcards count as their literal text
MERGE_SEGMENTS = 3  # an update leaving more segments than this merges them in the background
logger = logging.getLogger("pitfalls")


def build_schema(cjk: str = "bigram") -> Schema:
    prose = prose_analyzer(cjk)
    code = code_analyzer(cjk)
    return Schema(
        id=ID(stored=True, unique=True),
        kind=ID(stored=True),
        tags=KEYWORD(stored=True, commas=True, lowercase=True, scorable=False),
        id_text=TEXT(analyzer=code),
        title=TEXT(analyzer=prose, stored=True),
        aliases=TEXT(analyzer=code, stored=True),
        questions=TEXT(analyzer=prose, stored=True),
        glossary=TEXT(analyzer=prose),  # app.search.glossary's expansions
        signatures=TEXT(analyzer=code, stored=True),
        summary=TEXT(analyzer=prose, stored=True),
        body=TEXT(analyzer=prose, stored=True),
        code=TEXT(analyzer=code),
        spell=TEXT(analyzer=spelling_analyzer(), phrase=False),  # for "did you mean"
        updated=STORED(),
    )


# -- writing -----------------------------------------------------------------------------------


def _storage(generation: Path) -> FileStorage:
    # Plain reads, never mmap: a segment truncated under a process must be an error it can
    # handle (a rebuild), not a SIGBUS that kills it.
    return FileStorage(str(generation), supports_mmap=False)


def write_generation(generation: Path, docs, cjk: str = "bigram") -> None:
    ix = _storage(generation).create_index(build_schema(cjk))
    writer = ix.writer(limitmb=256, procs=1)
    try:
        for doc in docs:
            writer.add_document(**doc)
    except BaseException:
        writer.cancel()
        ix.close()
        raise
    writer.commit()
    ix.close()


def _writer_now(generation: Path):
    """(index, writer) of `generation`, or None when another writer holds it right now."""
    ix = _storage(generation).open_index()
    try:
        return ix, ix.writer(timeout=0)
    except LockError:
        ix.close()
        return None


def apply_changes(generation: Path, entry_ids: list[str], documents: dict[str, dict]) -> bool:
    """Replace or delete the documents of `entry_ids`; False when another writer holds the
    index (it is applying the same changes)."""
    opened = _writer_now(generation)
    if opened is None:
        return False
    ix, writer = opened
    try:
        for entry_id in entry_ids:
            if entry_id in documents:
                writer.update_document(**documents[entry_id])
            else:
                writer.delete_by_term("id", entry_id)
    except BaseException:
        writer.cancel()
        ix.close()
        raise
    writer.commit()
    segments = len(ix._segments())
    ix.close()
    if segments > MERGE_SEGMENTS:
        merge_in_background(generation)
    return True


# The largest segment is merged with the others only once this share of its documents are
# deleted (edited or gone): until then a merge rewrites only what edits wrote since.
FULL_MERGE_DELETED_SHARE = 0.2


def _merge_all_but_the_largest(writer, segments):
    """Whoosh's merge policy hook: the small segments (what edits added) are merged into one,
    and the largest is kept as it is, so a merge after an edit costs what the edits wrote
    rather than the whole index, and holds the writer (which the next edit waits for) only
    that long. The largest joins in once many of its documents are dead."""
    from whoosh.reading import SegmentReader

    ordered = sorted(segments, key=lambda s: s.doc_count_all())
    largest = ordered[-1] if ordered else None
    merged = ordered[:-1]
    if largest is not None and largest.deleted_count() > (
        FULL_MERGE_DELETED_SHARE * largest.doc_count_all()
    ):
        merged, largest = ordered, None
    if len(merged) < 2 and largest is not None:
        return segments
    for segment in merged:
        reader = SegmentReader(writer.storage, writer.schema, segment)
        writer.add_reader(reader)
        reader.close()
    return [largest] if largest is not None else []


def merge_segments(generation: Path) -> bool:
    """Merge the segments edits added into one (and the largest too, once it is mostly
    replaced); False when the index is being written right now (the next update merges)."""
    opened = _writer_now(generation)
    if opened is None:
        return False
    ix, writer = opened
    try:
        writer.commit(mergetype=_merge_all_but_the_largest)
    finally:
        ix.close()
    return True


_merging: set[Path] = set()
_merging_lock = threading.Lock()


def merge_in_background(generation: Path) -> threading.Thread | None:
    """Merge off the request path: searches go on reading the old segments meanwhile."""
    with _merging_lock:
        if generation in _merging:
            return None
        _merging.add(generation)

    def merge() -> None:
        try:
            merge_segments(generation)
        except Exception:
            logger.exception("merging the search index's segments failed")
        finally:
            with _merging_lock:
                _merging.discard(generation)

    thread = threading.Thread(target=merge, name="pitfalls-merge", daemon=True)
    thread.start()
    return thread


def segment_count(generation: Path) -> int:
    ix = _storage(generation).open_index()
    try:
        return len(ix._segments())
    finally:
        ix.close()


# -- reading -----------------------------------------------------------------------------------


class _TopAndAllCollector(TopCollector):
    """Top-N scoring that also keeps every matched document number, in one pass.

    Whoosh otherwise builds the (costly) multi-field matcher twice: once to score the page and
    once more to count the total and the facets. It checks the time budget as it goes. No
    matcher replacement (`replace=0`): it skips documents that cannot make the top N, and the
    total and facet counts would then miss them.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit, usequality=False, replace=0)

    def _collect(self, global_docnum: int, score: float):
        self.docset.add(global_docnum)
        if len(self.docset) % 256 == 0:
            check_budget()
        return super()._collect(global_docnum, score)


@dataclass
class Collected:
    ranked: list[tuple[float, int]]  # (score, document) for the best of the matches
    total: int
    matched: set[int]


class WhooshIndex:
    def __init__(self, generation: Path) -> None:
        self._ix = _storage(generation).open_index()

    def reader(self) -> "WhooshReader":
        return WhooshReader(self._ix.searcher())

    def close(self) -> None:
        self._ix.close()


def open_index(generation: Path) -> WhooshIndex:
    return WhooshIndex(generation)


@dataclass
class WhooshReader:
    """A searcher used by one thread at a time, with the facet sets of its index version."""

    searcher: Searcher
    facet_sets: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    builder: QueryBuilder | None = None

    @property
    def schema(self) -> Schema:
        return self.searcher.schema

    def up_to_date(self) -> bool:
        # Not Searcher.refresh(): it reuses segment readers with their old deletion sets, so
        # an entry deleted by a deletion-only commit would still be found.
        return self.searcher.up_to_date()

    def close(self) -> None:
        self.searcher.close()

    def query_builder(self) -> QueryBuilder:
        if self.builder is None:
            self.builder = QueryBuilder(self.schema, list(SEARCH_FIELDS), FIELD_BOOSTS)
        return self.builder

    def bound(self, query: Query) -> Query:
        return _bounded_query(query, self.searcher, [MAX_MULTI_TERMS])

    def doc_count(self) -> int:
        return self.searcher.doc_count()

    def collect(self, query: Query, limit: int) -> Collected:
        collector = _TopAndAllCollector(limit)
        self.searcher.search_with_collector(query, collector)
        ranked = [(score, docnum) for score, docnum in collector.results().top_n]
        return Collected(ranked, len(collector.docset), collector.docset)

    def narrow(self, collected: Collected, docs: list[int]) -> Collected:
        """The matches `docs` of `collected` alone (the ones shown above the relevance floor)."""
        kept = set(docs) & collected.matched
        return Collected([r for r in collected.ranked if r[1] in kept], len(kept), kept)

    def part_documents(self, query: Query, among: list[int]) -> tuple[int, set[int]]:
        """How many documents `query` matches, and which of `among` it matches."""
        docs = set(query.docs(self.searcher))
        return len(docs), docs & set(among)

    def _facet_set(self, fieldname: str) -> dict[str, frozenset[int]]:
        cached = self.facet_sets.get(fieldname)
        if cached is None:
            reader = self.searcher.reader()
            cached = {
                term.decode("utf-8"): frozenset(reader.postings(fieldname, term).all_ids())
                for term in reader.lexicon(fieldname)
            }
            self.facet_sets[fieldname] = cached
        return cached

    def facets(self, collected: Collected) -> dict[str, dict[str, int]]:
        matched = collected.matched
        return {
            name: {value: len(docs & matched) for value, docs in self._facet_set(fieldname).items()}
            for name, fieldname in FACET_FIELDS.items()
        }

    def known_word(self, lowered: str) -> bool:
        reader = self.searcher.reader()
        return ("spell", lowered) in reader or any(
            (fieldname, stem_word(lowered)) in reader for fieldname in STEMMED_FIELDS
        )

    def correction(self, lowered: str) -> str | None:
        found = self.searcher.suggest("spell", lowered, limit=1, maxdist=2, prefix=1)
        return found[0] if found else None

    def stored(self, docnum: int) -> dict:
        return self.searcher.stored_fields(docnum)


def _bounded_query(query: Query, searcher: Searcher, budget: list[int]) -> Query:
    """`query` with every wildcard, prefix and range replaced by at most a few real terms."""
    if isinstance(query, MultiTerm):
        check_budget()
        if isinstance(query, Prefix | Wildcard):
            literal = re.split(r"[*?]", query.text, maxsplit=1)[0]
            if len(literal) < MIN_WILDCARD_PREFIX or budget[0] <= 0:
                plain = query.text.replace("*", "").replace("?", "")
                return Term(query.fieldname, plain, boost=query.boost) if plain else NullQuery
        elif budget[0] <= 0:
            return NullQuery
        budget[0] -= 1
        reader = searcher.reader()
        terms = list(islice(query._btexts(reader), MAX_TERM_EXPANSION))
        field_type = searcher.schema[query.fieldname]
        return Or(
            [Term(query.fieldname, field_type.from_bytes(t)) for t in terms], boost=query.boost
        )
    if query.is_leaf():
        return query
    return query.apply(lambda sub: _bounded_query(sub, searcher, budget))
