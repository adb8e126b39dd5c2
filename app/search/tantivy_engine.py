"""The tantivy engine (`PITFALLS_SEARCH_ENGINE=tantivy`, `pip install "pitfalls[tantivy]"`).

Our analysis stays ours: every field is tokenized in Python by the analyzers the Whoosh schema
uses (`app.search.analysis`), and the tokens go to tantivy as pre-tokenized text with their own
positions, so an identifier's pieces share its position and phrases over them work as they do
in Whoosh. Queries are the Whoosh query trees `app.search.query` builds, translated term for
term (same fields, same boosts); wildcards are expanded from tantivy's term dictionary with the
same bounds. Totals are tantivy's exact counts, facet counts its terms aggregation over every
match; "did you mean" reads the `spell` field's vocabulary.
"""

import fnmatch
import json
import re
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from whoosh import query as wq

from app.budget import check_budget
from app.search.analysis import document_tokens, spelling_words
from app.search.engine import FIELD_BOOSTS, SEARCH_FIELDS
from app.search.query import QueryBuilder
from app.search.whoosh_engine import (
    MAX_MULTI_TERMS,
    MAX_TERM_EXPANSION,
    MIN_WILDCARD_PREFIX,
    STEMMED_FIELDS,
    build_schema,
)

try:
    import tantivy
except ImportError as error:  # an optional extra: say how to get it
    raise ImportError(
        'PITFALLS_SEARCH_ENGINE=tantivy needs the tantivy package: pip install "pitfalls[tantivy]"'
    ) from error

STORED_FIELDS = ("title", "aliases", "questions", "signatures", "summary", "body")
WRITER_HEAP = 64_000_000  # bytes a rebuild buffers before writing a segment
UPDATE_HEAP = 15_000_000  # tantivy's smallest writer heap: updates are a few documents
MAX_FACET_VALUES = 65_000  # more than any index has tags, so the aggregation is exact
MAX_SPELL_SCAN = 20_000  # vocabulary words read per first letter for "did you mean"
_schema_lock = threading.Lock()
_whoosh_schema = None


def analysis_schema():
    """The Whoosh schema, used only for its analyzers and field types (no index behind it)."""
    global _whoosh_schema
    with _schema_lock:
        if _whoosh_schema is None:
            _whoosh_schema = build_schema()
        return _whoosh_schema


def build_tantivy_schema() -> "tantivy.Schema":
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("kind", stored=True, tokenizer_name="raw", fast=True)
    builder.add_text_field("tags", tokenizer_name="raw", fast=True)  # lowercased, one a value
    builder.add_text_field("tag_list", stored=True, tokenizer_name="raw", index_option="basic")
    for name in SEARCH_FIELDS:
        builder.add_text_field(name, stored=name in STORED_FIELDS, tokenizer_name="whitespace")
    builder.add_text_field("spell", tokenizer_name="whitespace", index_option="freq")
    return builder.build()


# -- writing -----------------------------------------------------------------------------------


def _tokens(analyzer, text: str) -> "tantivy.PreTokenizedString":
    found = document_tokens(analyzer, text)
    if found is None:
        found = [
            (t.text, t.pos, t.startchar, t.endchar)
            for t in analyzer(text, positions=True, chars=True)
        ]
    tokens = [tantivy.Token(t, pos, start, end) for t, pos, start, end in found]
    return tantivy.PreTokenizedString(text, tokens)


def tantivy_document(doc: dict) -> "tantivy.Document":
    """One index document (`app.search.index.document_for`) as tantivy's, analyzed by us."""
    schema = analysis_schema()
    out = tantivy.Document()
    out.add_text("id", doc["id"])
    out.add_text("kind", doc.get("kind", ""))
    tags = doc.get("tags", "")
    out.add_text("tag_list", tags)
    for tag in dict.fromkeys(t.strip().lower() for t in tags.split(",")):
        if tag:
            out.add_text("tags", tag)
    for name in SEARCH_FIELDS:
        text = doc.get(name)
        if text:
            out.add_pre_tokenized_text(name, _tokens(schema[name].analyzer, text))
    spell = doc.get("spell")
    if spell:
        out.add_text("spell", " ".join(spelling_words(spell)))
    return out


def write_generation(generation: Path, docs, cjk: str = "bigram") -> None:
    if cjk != "bigram":
        raise ValueError("the tantivy engine analyzes Chinese as bigrams only")
    index = tantivy.Index(build_tantivy_schema(), path=str(generation))
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
    try:
        for doc in docs:
            writer.add_document(tantivy_document(doc))
    except BaseException:
        writer.rollback()
        raise
    writer.commit()
    writer.wait_merging_threads()


def apply_changes(generation: Path, entry_ids: list[str], documents: dict[str, dict]) -> bool:
    """Replace or delete the documents of `entry_ids`; False when another writer holds the
    index. Segments are merged by tantivy's merge policy, in a background thread."""
    index = tantivy.Index.open(str(generation))
    try:
        writer = index.writer(heap_size=UPDATE_HEAP, num_threads=1)
    except ValueError:  # the index's writer lock is held
        return False
    try:
        for entry_id in entry_ids:
            writer.delete_documents_by_term("id", entry_id)
            if entry_id in documents:
                writer.add_document(tantivy_document(documents[entry_id]))
        writer.commit()
    except BaseException:
        writer.rollback()
        writer.wait_merging_threads()
        raise
    threading.Thread(target=writer.wait_merging_threads, name="pitfalls-merge", daemon=True).start()
    return True


# -- reading -----------------------------------------------------------------------------------


def _meta_stamp(generation: Path) -> tuple[int, int]:
    stat = (generation / "meta.json").stat()
    return stat.st_mtime_ns, stat.st_size


class IndexFilesDamaged(OSError):
    """A segment file is not whole: reading its mapped pages would kill the process."""


FOOTER_MAGIC = 1337  # tantivy ends every segment file with `footer length: u32, 1337: u32`


def checked_files(generation: Path) -> dict[Path, int]:
    """Every file of the segments meta.json names, with its size, once each is found whole.

    tantivy maps its files into memory: a file shortened on disk makes the next search that
    touches the lost pages die of SIGBUS, which no handler can turn into an error. So a file is
    checked before it is mapped (its footer is where tantivy writes it, inside the file), and
    each search compares the sizes again (`TantivyReader.check_files`), one `stat` a file.
    """
    meta = json.loads((generation / "meta.json").read_text(encoding="utf-8"))
    sizes: dict[Path, int] = {}
    for segment in meta.get("segments", []):
        stem = str(segment["segment_id"]).replace("-", "")
        files = sorted(generation.glob(f"{stem}.*"))
        if not files:
            raise IndexFilesDamaged(f"segment {stem} of {generation.name} has no files")
        for path in files:
            with path.open("rb") as file:
                size = file.seek(0, 2)
                if size >= 8:
                    file.seek(size - 8)
                    footer, magic = struct.unpack("<II", file.read(8))
                if size < 8 or magic != FOOTER_MAGIC or footer + 8 > size:
                    raise IndexFilesDamaged(f"{path.name} is cut short ({size} bytes)")
            sizes[path] = size
    return sizes


class TantivyIndex:
    def __init__(self, generation: Path) -> None:
        self.generation = generation
        checked_files(generation)
        self._index = tantivy.Index.open(str(generation))
        self._schema = self._index.schema

    def reader(self) -> "TantivyReader":
        stamp = _meta_stamp(self.generation)
        sizes = checked_files(self.generation)  # before the reload maps any new segment
        self._index.reload()
        return TantivyReader(
            self.generation, stamp, self._index.searcher(), self._schema, sizes=sizes
        )

    def close(self) -> None:
        self._index = None  # type: ignore[assignment]  # dropped so that tantivy unmaps its files


def open_index(generation: Path) -> TantivyIndex:
    return TantivyIndex(generation)


@dataclass
class Collected:
    ranked: list[tuple[float, tuple[int, int]]]  # (score, (segment, document))
    total: int
    query: "tantivy.Query | None"  # the tantivy query, for the facet aggregation


@dataclass
class TantivyReader:
    generation: Path
    stamp: tuple[int, int]
    searcher: "tantivy.Searcher"
    tschema: "tantivy.Schema"
    builder: QueryBuilder | None = None
    ids: dict[tuple[int, int], str] = field(default_factory=dict)
    spell_words: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    sizes: dict[Path, int] = field(default_factory=dict)  # of the files this searcher maps

    def check_files(self) -> None:
        """The mapped files still have the sizes they were checked at (see `checked_files`)."""
        for path, size in self.sizes.items():
            if path.stat().st_size != size:
                raise IndexFilesDamaged(f"{path.name} changed size under the index")

    @property
    def schema(self):
        return analysis_schema()

    def up_to_date(self) -> bool:
        try:
            return _meta_stamp(self.generation) == self.stamp
        except OSError:
            return False

    def close(self) -> None:
        self.searcher = None  # type: ignore[assignment]  # a closed reader is never used again

    def query_builder(self) -> QueryBuilder:
        if self.builder is None:
            self.builder = QueryBuilder(self.schema, list(SEARCH_FIELDS), FIELD_BOOSTS)
        return self.builder

    def doc_count(self) -> int:
        return self.searcher.num_docs

    # -- queries -----------------------------------------------------------------------

    def bound(self, query: wq.Query) -> wq.Query:
        """Wildcards and prefixes as at most a few real terms, as the Whoosh engine does.
        A search's first read of the index: its files are checked here, each time."""
        self.check_files()
        return self._bound(query, [MAX_MULTI_TERMS])

    def _bound(self, query: wq.Query, budget: list[int]) -> wq.Query:
        if isinstance(query, wq.MultiTerm):
            check_budget()
            if not isinstance(query, wq.Prefix | wq.Wildcard):
                return wq.NullQuery
            text = query.text.lower()
            pattern = text + "*" if isinstance(query, wq.Prefix) else text
            literal = re.split(r"[*?]", pattern, maxsplit=1)[0]
            if len(literal) < MIN_WILDCARD_PREFIX or budget[0] <= 0:
                plain = text.replace("*", "").replace("?", "")
                return wq.Term(query.fieldname, plain, boost=query.boost) if plain else wq.NullQuery
            budget[0] -= 1
            found = self.searcher.terms_with_prefix(query.fieldname, literal, limit=5000)
            terms = sorted(t for t, _n in found if fnmatch.fnmatchcase(t, pattern))
            return wq.Or(
                [wq.Term(query.fieldname, t) for t in terms[:MAX_TERM_EXPANSION]],
                boost=query.boost,
            )
        if query.is_leaf():
            return query
        return query.apply(lambda sub: self._bound(sub, budget))

    def translate(self, query: wq.Query):
        """The tantivy query for a Whoosh one; None for a query that matches nothing."""
        Q, Occur = tantivy.Query, tantivy.Occur
        boost = getattr(query, "boost", 1.0)
        if query is wq.NullQuery or isinstance(query, type(wq.NullQuery)):
            return None
        if isinstance(query, wq.Every):
            out = Q.all_query()
        elif isinstance(query, wq.Term):
            out = Q.term_query(self.tschema, query.fieldname, query.text)
        elif isinstance(query, wq.Phrase):
            words = list(query.words)
            if not words:
                return None
            if len(words) == 1:
                out = Q.term_query(self.tschema, query.fieldname, words[0])
            else:
                out = Q.phrase_query(
                    self.tschema,
                    query.fieldname,
                    list(enumerate(words)),
                    slop=max(0, query.slop - 1),
                )
        elif isinstance(query, wq.AndNot):
            positive = self.translate(query.a)
            if positive is None:
                return None
            negative = self.translate(query.b)
            if negative is None:
                out = positive
            else:
                out = Q.boolean_query([(Occur.Must, positive), (Occur.MustNot, negative)])
        elif isinstance(query, wq.And):
            subs = [self.translate(sub) for sub in query.subqueries]
            if not subs or any(sub is None for sub in subs):
                return None
            out = subs[0] if len(subs) == 1 else Q.boolean_query([(Occur.Must, s) for s in subs])
        elif isinstance(query, wq.Or):
            subs = [s for s in (self.translate(sub) for sub in query.subqueries) if s is not None]
            if not subs:
                return None
            out = subs[0] if len(subs) == 1 else Q.boolean_query([(Occur.Should, s) for s in subs])
        else:
            raise TypeError(f"no tantivy translation for {type(query).__name__}")
        return Q.boost_query(out, boost) if boost != 1.0 else out

    # -- searching ---------------------------------------------------------------------

    def collect(self, query: wq.Query, limit: int) -> Collected:
        translated = self.translate(query)
        if translated is None:
            return Collected([], 0, None)
        found = self.searcher.search(translated, max(1, limit), count=True)
        ranked = [(score, (a.segment_ord, a.doc)) for score, a in found.hits[:limit]]
        total = found.count  # type: ignore[attr-defined]  # tantivy's stub omits `count`
        return Collected(ranked, total, translated)

    def narrow(self, collected: Collected, docs: list[tuple[int, int]]) -> Collected:
        """The matches `docs` of `collected` alone (the ones shown above the relevance floor)."""
        if collected.query is None or not docs:
            return Collected([], 0, None)
        only = tantivy.Query.term_set_query(self.tschema, "id", [self._id_of(d) for d in docs])
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, collected.query), (tantivy.Occur.Must, only)]
        )
        kept = set(docs)
        return Collected([r for r in collected.ranked if r[1] in kept], len(kept), query)

    def _id_of(self, doc: tuple[int, int]) -> str:
        if doc not in self.ids:
            if len(self.ids) > 10_000:
                self.ids.clear()
            self.ids[doc] = self.stored(doc)["id"]
        return self.ids[doc]

    def part_documents(self, query: wq.Query, among: list) -> tuple[int, set]:
        """How many documents `query` matches, and which of `among` it matches."""
        translated = self.translate(query)
        if translated is None or not among:
            return 0, set()
        found = self.searcher.search(translated, 1, count=True)
        count = found.count  # type: ignore[attr-defined]  # tantivy's stub omits `count`
        if not count:
            return 0, set()
        only = tantivy.Query.term_set_query(self.tschema, "id", [self._id_of(d) for d in among])
        within = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, translated), (tantivy.Occur.Must, only)]
        )
        hits = self.searcher.search(within, len(among), count=False).hits
        return count, {(a.segment_ord, a.doc) for _score, a in hits}

    def facets(self, collected: Collected) -> dict[str, dict[str, int]]:
        if collected.query is None:
            return {"kind": {}, "tag": {}}
        terms = {"size": MAX_FACET_VALUES, "segment_size": MAX_FACET_VALUES}
        found = self.searcher.aggregate(
            collected.query,
            {
                "kind": {"terms": {"field": "kind", **terms}},
                "tag": {"terms": {"field": "tags", **terms}},
            },
        )
        return {
            name: {b["key"]: int(b["doc_count"]) for b in found[name]["buckets"]}
            for name in ("kind", "tag")
        }

    def stored(self, doc: tuple[int, int]) -> dict:
        values = self.searcher.doc(tantivy.DocAddress(*doc)).to_dict()
        stored = {name: found[0] for name, found in values.items() if found}
        stored["tags"] = stored.pop("tag_list", "")
        return stored

    # -- "did you mean" ----------------------------------------------------------------

    def known_word(self, lowered: str) -> bool:
        from app.search.analysis import stem_word

        if self.searcher.doc_freq("spell", lowered):
            return True
        stem = stem_word(lowered)
        return any(self.searcher.doc_freq(name, stem) for name in STEMMED_FIELDS)

    def correction(self, lowered: str) -> str | None:
        """The most frequent vocabulary word within two edits that starts with the same
        letter (Whoosh's rule for its `spell` field)."""
        first = lowered[0]
        words = self.spell_words.get(first)
        if words is None:
            words = self.searcher.terms_with_prefix("spell", first, limit=MAX_SPELL_SCAN)
            self.spell_words[first] = words
        best: tuple[int, str] | None = None
        for word, freq in words:
            if abs(len(word) - len(lowered)) > 2 or word == lowered:
                continue
            if within_two_edits(lowered, word) and (best is None or (-freq, word) < best):
                best = (-freq, word)
        return best[1] if best else None


def within_two_edits(a: str, b: str, limit: int = 2) -> bool:
    """Levenshtein distance of `a` and `b` at most `limit` (insert, delete, substitute)."""
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other))
            )
        if min(current) > limit:
            return False
        previous = current
    return previous[-1] <= limit
