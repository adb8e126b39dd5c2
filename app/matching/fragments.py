"""Error text inside a sentence: a run of an entry's error message found in a search query.

A title such as "Expected all tensors to be on the same device 怎么解决" or "why do I get
size mismatch for fc.weight when loading" holds part of an error, not the whole message a
signature's regex needs, and no exception line for the traceback reader to find. Here each
signature's `example` is read as a sequence of words (Latin letters, digits, `_`; case
ignored, every number the same word), and a query is a fragment match for an entry when it
holds a long enough run of those words in the same order. Chinese and other words around the
run do not matter.

Invariants: the lookup is by word trigrams (a dict), so a query costs a few dictionary reads
and a longest-run pass over the few examples that share a trigram with it; nothing here is a
regex built from entry text.
"""

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from app.matching.signature_tier import PitfallMatch, SignatureHit, SignatureRecord

_WORD = re.compile(r"[A-Za-z0-9_]+")
# Words that are no evidence alone (every paste says torch): a run needs others as well.
_COMMON = frozenset(
    """
    a an and are as at be but by can do does error errors for from get got has have how i if
    in is it its me my no not of on or so than that the then there this to was were what
    torch pytorch when which while why with you your
    """.split()  # noqa: SIM905 (a list of words reads better as words)
)
# A run of MIN_RUN_WORDS words, MIN_CONTENT_WORDS of them not common ("missing key s in
# state_dict"), or a shorter run that is most of a short message ("device side assert
# triggered"): a few words of a long message ("torch.cuda.is_available() is false") are what
# many errors and questions share.
MIN_RUN_WORDS = 5
MIN_CONTENT_WORDS = 4
MIN_SHORT_RUN_WORDS = 4
MIN_SHORT_RUN_SHARE = 0.6
MIN_SHORT_CONTENT_WORDS = 3
MIN_RUN_CHARS = 18
CANDIDATE_EXAMPLES = 24  # examples sharing the most trigrams with the query, read in full
MAX_QUERY_WORDS = 64


@dataclass(frozen=True)
class FragmentHit:
    record: SignatureRecord
    position: int  # the record's index among the matcher's records
    words: int  # how many of the example's words, in order, the query holds
    shared: int  # word trigrams of the example the query holds, anywhere: the tie-break
    span: tuple[int, int]  # of that run in the query
    share: float  # of the example's words


def _rank(hit: FragmentHit) -> tuple[int, int, float]:
    return (-hit.words, -hit.shared, -hit.share)


def _words(text: str) -> list[tuple[str, int, int]]:
    """Each word lowered, with its span; numbers are one word, "#" (a pid, a size, a rank)."""
    return [
        ("#" if m.group().isdigit() else m.group().lower(), m.start(), m.end())
        for m in _WORD.finditer(text)
    ]


def _longest_run(query: list[str], example: list[str]) -> tuple[int, int]:
    """(length, end in `query`) of the longest run of words both hold in the same order."""
    best, best_end = 0, 0
    previous = [0] * (len(example) + 1)
    for i, word in enumerate(query, 1):
        current = [0] * (len(example) + 1)
        for j, other in enumerate(example, 1):
            if word == other:
                current[j] = previous[j - 1] + 1
                if current[j] > best:
                    best, best_end = current[j], i
        previous = current
    return best, best_end


class FragmentIndex:
    """The signatures' examples as word sequences, found by the word trigrams they hold."""

    def __init__(self, records: Iterable[SignatureRecord]) -> None:
        self.records = tuple(records)
        self._examples = [[w for w, _, _ in _words(r.example)] for r in self.records]
        self._by_trigram: dict[tuple[str, str, str], set[int]] = defaultdict(set)
        for index, words in enumerate(self._examples):
            for at in range(len(words) - 2):
                self._by_trigram[words[at], words[at + 1], words[at + 2]].add(index)

    def find(self, text: str) -> list[FragmentHit]:
        """The best hit of each entry whose example shares a long enough run with `text`,
        longest run first."""
        found = _words(text)[:MAX_QUERY_WORDS]
        query = [w for w, _, _ in found]
        shared: dict[int, int] = defaultdict(int)
        for at in range(len(query) - 2):
            for index in self._by_trigram.get((query[at], query[at + 1], query[at + 2]), ()):
                shared[index] += 1
        candidates = sorted(shared, key=lambda i: -shared[i])[:CANDIDATE_EXAMPLES]
        best: dict[str, FragmentHit] = {}
        for index in candidates:
            example = self._examples[index]
            length, end = _longest_run(query, example)
            run = query[end - length : end]
            share = length / max(1, len(example))
            content = sum(w not in _COMMON for w in run)
            long_enough = (length >= MIN_RUN_WORDS and content >= MIN_CONTENT_WORDS) or (
                length >= MIN_SHORT_RUN_WORDS
                and share >= MIN_SHORT_RUN_SHARE
                and content >= MIN_SHORT_CONTENT_WORDS
            )
            if not long_enough:
                continue
            span = (found[end - length][1], found[end - 1][2])
            if span[1] - span[0] < MIN_RUN_CHARS:
                continue
            record = self.records[index]
            hit = FragmentHit(record, index, length, shared[index], span, share)
            current = best.get(record.entry_id)
            if current is None or _rank(hit) < _rank(current):
                best[record.entry_id] = hit
        return sorted(best.values(), key=lambda h: (*_rank(h), h.record.entry_id))

    def matches(self, text: str) -> list[PitfallMatch]:
        """`find` as the signature tier's matches (`matched_in` "fragment"), so an answer shows
        them as it shows any signature match: the example, and the words of the query it
        holds. Only the hits as good as the best one (as long a run, as many trigrams): a shorter
        run is the part of a longer message that other errors share."""
        hits = self.find(text)
        if not hits:
            return []
        matches = []
        for hit in hits:
            if _rank(hit)[:2] != _rank(hits[0])[:2]:
                break
            confidence = round(min(0.9, 0.55 + 0.25 * hit.share + 0.02 * hit.words), 3)
            signature_hit = SignatureHit(hit.record, hit.position, hit.span)
            subject = text[hit.span[0] : hit.span[1]]
            matches.append(
                PitfallMatch(
                    hit.record.entry_id, confidence, signature_hit, "fragment", None, subject, text
                )
            )
        return matches
