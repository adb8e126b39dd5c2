"""The memory tier: labelled real pastes as evidence for the likely tier.

The project's labelled pastes (`tests/data/real-pastes/`) ship with the package as what the
likely tier reads of each: the normalized message (paths, numbers, addresses and sizes already
placeholders), the exception type and the names in its last frames, with the entry its thread's
resolution named, or none for a paste no entry explains, and a digest of the thread's address.
Never the pasted text itself.

For a paste that no signature claims, its nearest remembered pastes (BM25 over the same words the
likely tier reads, frame names at half weight; bounded: very common words propose nothing) give
each candidate entry three features for the calibrated model:

- `memory_votes`: the share of the neighbours' similarity that names this entry;
- `memory_best`: the similarity of the closest neighbour that names it;
- `memory_negative`: the similarity of the closest neighbour that no entry explains (the same
  for every candidate of a paste: evidence against any claim).

Similarity is the harmonic mean of how much of the paste's rare-word weight a neighbour holds
(over the words the memory knows) and how much of the neighbour's the paste holds. An entry the
neighbours name becomes a candidate even when the entries' own text does not propose it (another
wording of its error, a paste cut before its error). A paste's own thread never votes for it
when the corpus measures itself (`exclude_thread`).
"""

import gzip
import hashlib
import heapq
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.budget import check_budget
from app.matching.likely import Query, tokens
from app.normalization import normalize_message

MEMORY_FILE = Path(__file__).with_name("memory.json.gz")
FORMAT = 1
NEIGHBOURS = 10
MEMORY_FEATURES = ("memory_votes", "memory_best", "memory_negative")
# A neighbour at least this similar puts its entry among the candidates.
PROPOSE_SIMILARITY = 0.25
_MESSAGE_CHARS = 1500
_FRAME_CHARS = 600
_COMMON_SHARE = 0.2
# What bounds a paste's work whatever the memory's size: a word held by more pastes than this
# proposes none (it still weighs in the similarity), and only the rarest words propose.
_MAX_POSTINGS = 2000
_PROPOSING_WORDS = 64
_FRAME_WEIGHT = 0.5
_BM25_K1 = 1.2
_BM25_B = 0.75


def thread_key(source: str) -> str:
    """A short digest of a thread's address: enough to leave a paste's own thread out."""
    return hashlib.sha256(source.strip().lower().encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Remembered:
    """One labelled paste, as the memory keeps it."""

    thread: str  # thread_key of its source
    label: str | None  # the entry that explains it, or None
    message: str  # normalized
    exception_type: str | None = None
    frames: str = ""

    @classmethod
    def of(cls, query: Query, *, source: str, label: str | None) -> "Remembered":
        return cls(
            thread=thread_key(source),
            label=label,
            message=normalize_message(query.message)[:_MESSAGE_CHARS],
            exception_type=query.exception_type,
            frames=query.frame_text[:_FRAME_CHARS],
        )


@dataclass(frozen=True)
class Neighbour:
    item: Remembered
    similarity: float


def _terms(message: str, exception_type: str | None, frames: str) -> dict[str, float]:
    terms: dict[str, float] = {}
    for word in tokens(normalize_message(message)):
        terms[word] = terms.get(word, 0.0) + 1.0
    for word in tokens(frames):
        terms[word] = terms.get(word, 0.0) + _FRAME_WEIGHT
    if exception_type:
        key = "type:" + exception_type.rsplit(".", 1)[-1].lower()
        terms[key] = terms.get(key, 0.0) + 1.0
    return {sys.intern(t): w for t, w in terms.items()}


class PasteMemory:
    """An inverted index of remembered pastes; `neighbours` finds the closest to a query."""

    def __init__(self, items: Iterable[Remembered]) -> None:
        self.items: list[Remembered] = list(items)
        self._terms = [_terms(i.message, i.exception_type, i.frames) for i in self.items]
        postings: dict[str, list[int]] = {}
        for index, terms in enumerate(self._terms):
            for term in terms:
                postings.setdefault(term, []).append(index)
        self._postings = postings
        self._by_thread: dict[str, list[int]] = {}
        for index, item in enumerate(self.items):
            self._by_thread.setdefault(item.thread, []).append(index)
        count = max(1, len(self.items))
        self._count = count
        self._lengths = [sum(t.values()) for t in self._terms]
        self._average = (sum(self._lengths) / count) or 1.0
        self._norms = [
            _BM25_K1 * (1 - _BM25_B + _BM25_B * length / self._average) for length in self._lengths
        ]
        self._common = min(_MAX_POSTINGS, max(8, int(count * _COMMON_SHARE)))
        self._unknown_idf = math.log(1 + (count + 0.5) / 0.5)

    def __len__(self) -> int:
        return len(self.items)

    def idf(self, term: str, without: "dict[str, int] | None" = None) -> float:
        """`without`: how many pastes holding each term not to count (a left-out thread's)."""
        found = self._postings.get(term)
        n = len(found) if found else 0
        if without:
            n -= without.get(term, 0)
        if n <= 0:
            return self._unknown_idf
        return math.log(1 + (self._count - n + 0.5) / (n + 0.5))

    def neighbours(
        self, query: Query, *, exclude_thread: str | None = None, limit: int = NEIGHBOURS
    ) -> list[Neighbour]:
        """The `limit` remembered pastes closest to `query`, most similar first."""
        wanted = _terms(query.message, query.exception_type, query.frame_text)
        if not wanted:
            return []
        excluded = thread_key(exclude_thread) if exclude_thread else None
        # A left-out thread is left out of the counts too, so that a paste measured against the
        # others weighs its words as a paste from a new thread would.
        without: dict[str, int] = {}
        for index in self._by_thread.get(excluded, ()) if excluded else ():
            for term in self._terms[index]:
                without[term] = without.get(term, 0) + 1

        def idf(term: str) -> float:
            return self.idf(term, without)

        def known(term: str) -> bool:
            return len(self._postings.get(term, ())) > without.get(term, 0)

        proposing = [
            (term, weight)
            for term, weight in wanted.items()
            if 0 < len(self._postings.get(term, ())) <= self._common
        ]
        proposing = heapq.nlargest(_PROPOSING_WORDS, proposing, key=lambda tw: idf(tw[0]))
        scores: dict[int, float] = {}
        terms_of, norms = self._terms, self._norms
        for term, weight in proposing:
            check_budget()
            weight_idf = idf(term) * min(weight, 1.0) * (_BM25_K1 + 1)
            for index in self._postings[term]:
                tf = terms_of[index][term]
                scores[index] = scores.get(index, 0.0) + weight_idf * tf / (tf + norms[index])
        # The best by BM25, then re-ranked by similarity below; a left-out thread's own pastes
        # are skipped there, so as many more are taken.
        skipped = len(self._by_thread.get(excluded, ())) if excluded else 0
        ranked = heapq.nlargest(limit * 3 + skipped, scores.items(), key=lambda item: item[1])
        # Over the words some remembered paste holds: a word none holds (the user's own
        # function and file names, mostly) tells no neighbour from another.
        mass = sum(idf(t) * min(w, 1.0) for t, w in wanted.items() if known(t))
        out: list[Neighbour] = []
        for index, _score in ranked:
            item = self.items[index]
            if excluded is not None and item.thread == excluded:
                continue
            terms = self._terms[index]
            shared = sum(idf(t) * min(w, 1.0) for t, w in wanted.items() if t in terms)
            own = sum(idf(t) * min(w, 1.0) for t, w in terms.items())
            cover = shared / mass if mass else 0.0
            recall = shared / own if own else 0.0
            similarity = 2 * cover * recall / (cover + recall) if cover + recall else 0.0
            out.append(Neighbour(item, similarity))
            if len(out) >= limit * 3:  # ranked by BM25; re-ranked by similarity below
                break
        out.sort(key=lambda n: n.similarity, reverse=True)
        return out[:limit]


@dataclass(frozen=True)
class Votes:
    """What the neighbours of one paste say."""

    by_entry: dict[str, tuple[float, float]]  # entry -> (share of similarity, best similarity)
    negative: float  # the best similarity of a neighbour no entry explains

    def features(self, entry_id: str) -> dict[str, float]:
        share, best = self.by_entry.get(entry_id, (0.0, 0.0))
        return {"memory_votes": share, "memory_best": best, "memory_negative": self.negative}

    def proposed(self) -> list[str]:
        """The entries a close enough neighbour names, closest first."""
        ranked = sorted(self.by_entry.items(), key=lambda item: item[1][1], reverse=True)
        return [entry for entry, (_, best) in ranked if best >= PROPOSE_SIMILARITY]


NO_VOTES = Votes({}, 0.0)


def votes(neighbours: Sequence[Neighbour], known: "set[str] | None" = None) -> Votes:
    """The neighbours' labels as votes; labels not in `known` (entries since removed) are left
    out of the votes but still weigh in the total."""
    total = sum(n.similarity for n in neighbours)
    if not neighbours or total <= 0:
        return NO_VOTES
    by_entry: dict[str, tuple[float, float]] = {}
    negative = 0.0
    for neighbour in neighbours:
        label = neighbour.item.label
        if label is None:
            negative = max(negative, neighbour.similarity)
            continue
        if known is not None and label not in known:
            continue
        share, best = by_entry.get(label, (0.0, 0.0))
        by_entry[label] = (share + neighbour.similarity / total, max(best, neighbour.similarity))
    return Votes(by_entry, negative)


# -- the shipped memory ------------------------------------------------------------------------


def write_memory(items: Sequence[Remembered], path: Path = MEMORY_FILE) -> None:
    """Write the memory as the package ships it (gzip JSON, rows in a stable order, no date:
    the same corpus gives the same bytes)."""
    rows = sorted([i.thread, i.label, i.message, i.exception_type, i.frames] for i in items)
    payload = json.dumps(
        {"format": FORMAT, "rows": rows}, ensure_ascii=False, separators=(",", ":")
    )
    path.write_bytes(gzip.compress(payload.encode("utf-8"), mtime=0))


def read_memory(path: Path = MEMORY_FILE) -> list[Remembered]:
    data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: memory format {data.get('format')!r}, expected {FORMAT}")
    return [Remembered(t, label, m, e, f) for t, label, m, e, f in data["rows"]]


@cache
def shipped_memory() -> PasteMemory | None:
    """The package's memory, read once per process; None (no memory tier) when the file is
    missing or damaged."""
    try:
        return PasteMemory(read_memory())
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        return None
