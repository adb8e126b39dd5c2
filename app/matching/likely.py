"""The likely tier: entries scored by how much of a paste's error they cover.

Each entry becomes one small document: its signature examples, title, aliases, summary and the
"What you see" text, with field weights. A paste becomes a query: the normalized message of the
error to explain (or, for a fragment with no exception line, its text) and, apart, the names in
the user's last frames. Candidates come from an inverted index (BM25); each candidate then gets a
few features that a calibrated model (`calibration`) turns into one confidence:

- `coverage`: the share of the message's rare-token weight (IDF) that the entry's text holds;
- `example_cover`: the same against the best single signature example (a fragment of a message
  is covered whole by the example it came from);
- `example_recall`: the share of that example's weight found in the message (the whole message,
  with noise around it);
- `type`: the paste's exception type agrees with the entry's signatures (1), disagrees (0), or
  one of them is unknown (0.5);
- `frames`: the share of the frame names' weight that the entry's text holds;
- `margin`: how far the candidate's BM25 score is ahead of the next one's;
- `weak_hit`: one of the entry's signatures matched but was not certain enough to count;
- `length`: how many distinct words the message has (a two-word message says little).

Everything is pure Python over small dictionaries, built once per change of the content.
"""

import bisect
import hashlib
import marshal
import math
import re
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from whoosh.lang.porter import stem as porter_stem

from app import normalization
from app.budget import check_budget
from app.files import write_atomically
from app.normalization import normalize_message

FEATURES = (
    "coverage",
    "example_cover",
    "example_recall",
    "type",
    "frames",
    "margin",
    "weak_hit",
    "length",
    # the memory tier's (app.matching.memory): what labelled real pastes like this one say
    "memory_votes",
    "memory_best",
    "memory_negative",
)
CANDIDATES = 5
# Field weights of an entry's document: what an error prints counts most.
_WEIGHTS = {"examples": 3, "title": 2, "aliases": 2, "symptoms": 1, "summary": 1}
# A word in more than this share of the entries does not propose candidates (it still counts in
# the features): it would only make every query touch every entry.
_COMMON_SHARE = 0.25
_BM25_K1 = 1.2
_BM25_B = 0.75

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[{_CJK}]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")
_PLACEHOLDER = re.compile(r"<(?:path|addr|shape|dtype|device|size|n)>")
# Words that say nothing about which error it is: English function words and the vocabulary
# of every traceback.
_STOP = frozenset(
    """
    a an and are as at be been but by can could did do does for from had has have he her his
    how i if in into is it its me my no not of on or our she so than that the their them then
    there these they this those to too was we were what when where which while who why will
    with would you your yes also any all some such just only one two use used using please file
    line traceback most recent call last error exception raise raised self return py def none
    true false see above following occurred
    """.split()  # noqa: SIM905 (a list of words reads better as words)
)


def _parts(word: str) -> Iterable[str]:
    segments = [s for s in word.split(".") if s]
    if len(segments) > 1:
        yield word.lower()  # the dotted name whole: torch.cuda.floattensor
    pieces = []
    for segment in segments:
        split = [p for p in segment.split("_") if p]
        if len(split) > 1:
            yield segment.lower()  # the identifier whole: num_batches_tracked
        pieces.extend(split)
    for piece in pieces:
        camel = _CAMEL.findall(piece)
        if len(camel) > 1:
            yield piece.lower()
            yield from (c.lower() for c in camel)
        else:
            yield piece.lower()


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Porter's stem, remembered: the same few thousand words come back in every entry."""
    return porter_stem(word)


def token_pairs(text: str) -> list[tuple[str, str]]:
    """(stemmed token, the word as written) for the words and identifier parts of `text`."""
    out: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(_PLACEHOLDER.sub(" ", text)):
        word = match.group()
        if word[0] >= "\u3400":
            out.extend((word[i : i + 2], word[i : i + 2]) for i in range(max(1, len(word) - 1)))
            continue
        out.extend(_word_tokens(word))
    return out


@lru_cache(maxsize=1 << 16)
def _word_tokens(word: str) -> tuple[tuple[str, str], ...]:
    """The (token, as written) pairs of one word: computed once per distinct word."""
    return tuple(
        (stem(part) if part.isalpha() else part, part)
        for part in _parts(word)
        if len(part) >= 2 and part not in _STOP
    )


def tokens(text: str) -> list[str]:
    """Stemmed words and identifier parts of `text`, placeholders and stop words left out."""
    return [token for token, _ in token_pairs(text)]


@dataclass(frozen=True)
class EntryText:
    """What the likely tier reads of one entry."""

    entry_id: str
    title: str
    summary: str = ""
    aliases: tuple[str, ...] = ()
    symptoms: str = ""  # the "What you see" section
    examples: tuple[str, ...] = ()  # the signatures' examples
    exception_types: frozenset[str] = frozenset()

    @classmethod
    def of(cls, entry, body_symptoms: str, signatures: Iterable) -> "EntryText":
        """From anything with an entry's id, title, summary and aliases (a stored entry or a
        file's front-matter) and its signatures (each with an example and an exception)."""
        signatures = list(signatures)
        return cls(
            entry_id=entry.id,
            title=entry.title,
            summary=entry.summary,
            aliases=tuple(entry.aliases),
            symptoms=body_symptoms,
            examples=tuple(s.example for s in signatures),
            exception_types=frozenset(s.exception for s in signatures if s.exception),
        )


@dataclass(frozen=True)
class Query:
    """What a paste asks: the error's words, its type, and the names in its last frames."""

    message: str
    exception_type: str | None
    frame_text: str = ""

    @cached_property
    def words(self) -> list[str]:
        return tokens(normalize_message(self.message))

    def as_written(self) -> dict[str, str]:
        """Each stemmed word of the message, as the message spells it (for people to read)."""
        out: dict[str, str] = {}
        for token, written in token_pairs(normalize_message(self.message)):
            out.setdefault(token, written)
        return out


@dataclass
class Candidate:
    entry_id: str
    score: float  # BM25
    confidence: float = 0.0  # set by the calibrated model
    features: dict[str, float] = field(default_factory=dict)
    words: list[str] = field(default_factory=list)  # the message's words the entry holds


@dataclass(slots=True)
class _Doc:
    """What the index keeps of one entry: small, since a team's 10,000 entries are all held.
    Terms are interned (one string per distinct word across entries); `terms` doubles as the
    vocabulary, and an example's words are a tuple (a handful, looked through rarely)."""

    entry_id: str
    terms: dict[str, int]
    length: float
    examples: list[tuple[str, ...]]
    exception_types: frozenset[str]


# What an emptied slot of an updated index holds until a new entry takes it (no posting names it).
_GONE = _Doc("", {}, 0.0, [], frozenset())


def _interned(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(sys.intern(w) for w in words))


def _entry_key(entry: EntryText) -> bytes:
    """An entry's text as a digest: what decides whether an entry must be read again, without
    holding a second copy of every entry's text. The exception types are sorted: a set's
    order differs from one process to the next (string hashing), and the key must not."""
    fields = (*astuple(entry)[:-1], sorted(entry.exception_types))
    return hashlib.blake2b(marshal.dumps(fields), digest_size=16).digest()


def _read_entry(entry: EntryText) -> "_Doc":
    fields = {
        "examples": " ".join(entry.examples),
        "title": entry.title,
        "aliases": " ".join(entry.aliases),
        "symptoms": entry.symptoms,
        "summary": entry.summary,
    }
    terms: Counter = Counter()
    for name, text in fields.items():
        for token in tokens(normalize_message(text)):
            terms[sys.intern(token)] += _WEIGHTS[name]
    return _Doc(
        entry_id=entry.entry_id,
        terms=dict(terms),
        length=float(sum(terms.values())),
        examples=[_interned(tokens(normalize_message(e))) for e in entry.examples],
        exception_types=entry.exception_types,
    )


def _code_digest() -> str:
    """What reading an entry depends on: this module's and the normalizer's code."""
    digest = hashlib.sha256()
    for module in (__file__, normalization.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


def read_saved_documents(path: Path) -> dict[bytes, "_Doc"]:
    """Entries read by an earlier process (`save_documents`), by `_entry_key`, or {} when the
    file is missing, damaged or written by other code: a cache, never a source of truth."""
    try:
        data = marshal.loads(path.read_bytes())
        if not isinstance(data, dict) or data.get("code") != _code_digest():
            return {}
        return documents_from_plain(data["docs"])
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        return {}


def documents_from_plain(docs: list) -> dict[bytes, "_Doc"]:
    """The entries `documents_as_plain` wrote (raises on anything else)."""
    saved = {}
    for key, entry_id, types, terms, length, examples in docs:
        saved[key] = _Doc(
            entry_id=entry_id,
            terms={sys.intern(t): n for t, n in terms.items()},
            length=length,
            examples=[_interned(e) for e in examples],
            exception_types=frozenset(types),
        )
    return saved


def documents_as_plain(index: "LikelyIndex") -> list:
    """What `index` read of each entry, as builtins (for marshal)."""
    return [
        (key, doc.entry_id, tuple(doc.exception_types), doc.terms, doc.length, doc.examples)
        for key, doc in index._doc_of.items()
    ]


def save_documents(index: "LikelyIndex", path: Path) -> None:
    """Keep what `index` read of each entry, so that a short-lived process (`pitfalls match`)
    tokenizes only the entries that changed since."""
    payload = marshal.dumps({"code": _code_digest(), "docs": documents_as_plain(index)})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, payload)


class LikelyIndex:
    """An inverted index of the entries' texts; `candidates` proposes and describes entries."""

    def __init__(
        self,
        entries: Iterable[EntryText],
        previous: "LikelyIndex | None" = None,
        saved: dict[bytes, "_Doc"] | None = None,
    ) -> None:
        """`previous`: an index of this process whose tokenized entries are reused where an
        entry's text is unchanged (a save re-reads only the entries that changed); `saved`:
        the same from `read_saved_documents`."""
        self._docs: list[_Doc] = []
        self._doc_of: dict[bytes, _Doc] = {}  # by `_entry_key`
        self.read_afresh = 0  # entries tokenized here rather than reused
        known = previous._doc_of if previous is not None else (saved or {})
        # term -> the indexes of the entries that hold it (its weight is in the entry's terms);
        # an array of ints, not a list of tuples: at 10,000 entries that was 100 MB.
        postings: dict[str, array] = {}
        for entry in entries:
            key = _entry_key(entry)
            doc = known.get(key) or self._doc_of.get(key)
            if doc is None:
                doc = _read_entry(entry)
                self.read_afresh += 1
            self._doc_of[key] = doc
            index = len(self._docs)
            self._docs.append(doc)
            for term in doc.terms:
                found = postings.get(term)
                if found is None:
                    found = postings[term] = array("i")
                found.append(index)
        self._postings = postings
        self._slot_of = {doc.entry_id: i for i, doc in enumerate(self._docs)}
        self._key_of = {doc.entry_id: key for key, doc in self._doc_of.items()}
        self._live = len(self._docs)
        self._total_length = sum(d.length for d in self._docs)
        self._set_counts()

    def _set_counts(self) -> None:
        """What follows from the number of entries and their lengths: computed from totals, so
        an index brought up to date (`updated`) weighs exactly as one built afresh."""
        count = max(1, self._live)
        self._count = count
        self._average = self._total_length / count if self._live else 1.0
        self._unknown_idf = math.log(1 + (count + 0.5) / 0.5)
        self._common = max(8, int(count * _COMMON_SHARE))

    def updated(self, changed: Iterable[str], entries: Iterable[EntryText]) -> "LikelyIndex":
        """A new index with the entries `changed` (ids) replaced by `entries` (their texts now;
        an id without one is gone): only those are read, and only their terms' postings are
        copied. This index is left as it was (a request may still be using it).

        Entries keep the order a fresh build gives when its entries come by id (the database's
        order): a new one is placed among the others by its id, so ties rank the same."""
        new = LikelyIndex.__new__(LikelyIndex)
        new._docs = list(self._docs)
        new._doc_of = dict(self._doc_of)
        new._postings = dict(self._postings)
        new._slot_of = dict(self._slot_of)
        new._key_of = dict(self._key_of)
        new._live = self._live
        new._total_length = self._total_length
        new.read_afresh = 0
        texts = {e.entry_id: e for e in entries}
        copied: set[str] = set()  # postings already copied for this update

        def posting(term: str) -> array:
            if term not in copied:
                copied.add(term)
                new._postings[term] = array("i", new._postings.get(term, ()))
            return new._postings[term]

        free: list[int] = []
        for entry_id in dict.fromkeys([*changed, *texts]):
            slot = new._slot_of.get(entry_id)
            if slot is not None:
                doc = new._docs[slot]
                for term in doc.terms:
                    found = posting(term)
                    found.remove(slot)
                    if not found:
                        del new._postings[term]
                        copied.discard(term)
                new._total_length -= doc.length
                new._live -= 1
                new._doc_of.pop(new._key_of.pop(entry_id), None)
            entry = texts.get(entry_id)
            if entry is None:
                if slot is not None:
                    del new._slot_of[entry_id]
                    free.append(slot)
                continue
            key = _entry_key(entry)
            known = self._doc_of.get(key)
            if known is None:
                known = _read_entry(entry)
                new.read_afresh += 1
            doc = known
            new._doc_of[key] = doc
            new._key_of[entry_id] = key
            if slot is None:
                slot = free.pop() if free else len(new._docs)
                if slot == len(new._docs):
                    new._docs.append(doc)
            new._docs[slot] = doc
            new._slot_of[entry_id] = slot
            new._live += 1
            new._total_length += doc.length
            docs = new._docs
            for term in doc.terms:
                found = posting(term)
                # by entry id, as a fresh build over entries in id order holds them
                found.insert(bisect.bisect(found, entry_id, key=lambda s: docs[s].entry_id), slot)
        for slot in free:  # a slot left empty: no posting names it any more
            new._docs[slot] = _GONE
        new._set_counts()
        return new

    def __len__(self) -> int:
        return self._live

    def idf(self, term: str) -> float:
        found = self._postings.get(term)
        if not found:
            return self._unknown_idf
        n = len(found)
        return math.log(1 + (self._count - n + 0.5) / (n + 0.5))

    def candidates(
        self,
        query: Query,
        *,
        weak_hits: Iterable[str] = (),
        limit: int = CANDIDATES,
        also: Sequence[str] = (),
    ) -> list[Candidate]:
        """The best `limit` entries for `query` by BM25, each with its features; then the
        entries `also` names (ids) that are not among them, described the same way."""
        words = list(dict.fromkeys(query.words))
        if not words:
            return []
        frame_words = list(dict.fromkeys(tokens(query.frame_text)))
        scores: dict[int, float] = {}
        # Frame names propose candidates too, at half the weight of the message's words.
        proposing = [(w, 1.0) for w in words] + [(w, 0.5) for w in frame_words if w not in words]
        for term, share in proposing:
            found = self._postings.get(term)
            if not found or len(found) > self._common:
                continue
            check_budget()
            idf = self.idf(term) * share
            for index in found:
                doc = self._docs[index]
                weight = doc.terms[term]
                norm = _BM25_K1 * (1 - _BM25_B + _BM25_B * doc.length / self._average)
                scores[index] = scores.get(index, 0.0) + idf * weight * (_BM25_K1 + 1) / (
                    weight + norm
                )
        ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)[:limit]
        taken = {index for index, _ in ranked}
        extra = [
            (slot, scores.get(slot, 0.0))
            for slot in (self._slot_of.get(entry_id) for entry_id in also)
            if slot is not None and slot not in taken
        ]
        if not ranked and not extra:
            return []
        leader = ranked[0][1] if ranked else 0.0
        weak = set(weak_hits)
        weights = {w: self.idf(w) for w in words}
        total = sum(weights.values())
        out = []
        for position, (index, score) in enumerate([*ranked, *extra]):
            doc = self._docs[index]
            following = ranked[position + 1][1] if position + 1 < len(ranked) else 0.0
            covered = [w for w in words if w in doc.terms]
            best_cover, best_recall = 0.0, 0.0
            for example in doc.examples:
                if not example:
                    continue
                cover = sum(weights[w] for w in words if w in example) / total
                mass = sum(self.idf(t) for t in example)
                recall = sum(self.idf(t) for t in example if t in weights) / mass
                if (cover, recall) > (best_cover, best_recall):
                    best_cover, best_recall = cover, recall
            frames = 0.0
            if frame_words:
                frame_total = sum(self.idf(w) for w in frame_words)
                frames = sum(self.idf(w) for w in frame_words if w in doc.terms) / frame_total
            if query.exception_type and doc.exception_types:
                agrees = 1.0 if query.exception_type in doc.exception_types else 0.0
            else:
                agrees = 0.5
            out.append(
                Candidate(
                    entry_id=doc.entry_id,
                    score=score,
                    words=covered,
                    features={
                        "coverage": sum(weights[w] for w in covered) / total,
                        "example_cover": best_cover,
                        "example_recall": best_recall,
                        "type": agrees,
                        "frames": frames,
                        # ahead of the next candidate (the leader) or behind the leader (others)
                        "margin": _margin(position, score, following, leader),
                        "weak_hit": 1.0 if doc.entry_id in weak else 0.0,
                        "length": min(1.0, math.log1p(len(words)) / math.log1p(30)),
                    },
                )
            )
        return out

    def has(self, entry_id: str) -> bool:
        return entry_id in self._slot_of

    def explain(self, candidate: Candidate, query: Query, limit: int = 6) -> list[str]:
        """The rarest words that made `candidate` likely, as the error spells them."""
        written = query.as_written()
        ranked = sorted(candidate.words, key=self.idf, reverse=True)[:limit]
        return list(dict.fromkeys(written.get(word, word) for word in ranked))


def _margin(position: int, score: float, following: float, leader: float) -> float:
    """How far the leader is ahead of the next candidate, or how far another one is behind the
    leader (-1 for an entry no word of the query proposed)."""
    if position == 0 and score > 0:
        return (score - following) / score
    return (score - leader) / leader if leader > 0 else -1.0


def frame_text(frames: Sequence[object], last: int = 3) -> str:
    """The function names, code and file names of the last frames, as one text."""
    parts = []
    for frame in list(frames)[-last:]:
        function = getattr(frame, "function", None) or ""
        code = getattr(frame, "code", None) or ""
        file = getattr(frame, "file", "") or ""
        name = re.split(r"[/\\]", file)[-1].removesuffix(".py")
        if function.startswith("<"):
            function = ""
        parts.extend([function, code, name])
    return " ".join(p for p in parts if p)
