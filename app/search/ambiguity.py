"""Ambiguous queries: when two or three entries fit a query about equally, say so, and say what
tells them apart.

"About equally" is read from the scores, never from a list of known pairs: the best hits that
score at least `SHARE` of the best one form the group, and a query is ambiguous when that group
holds two or three entries (one is an answer; four or more is a topic, which the result list
already shows). A Chinese query is read as bigrams, whose scores are flatter, so its share is
higher. Both shares were chosen on tests/data/queries (bench/questions.py): at 0.8 in English
most titles flagged whose first hit is wrong have their answer inside the group.

What tells the entries apart is what each one's title and summary say that the others' do not:
its own words, in the order it uses them.
"""

import re
from collections.abc import Sequence

from app.search.results import Ambiguity, SearchHit, TellApart

SHARE = 0.8
CJK_SHARE = 0.9
MAX_GROUP = 3
MAX_WORDS = 5
_WORD = re.compile(r"[A-Za-z_][\w.]*[A-Za-z0-9_]|[\u3400-\u9fff]{2,}")
_PLAIN = frozenset(
    """
    after all also and any are before but can each for from get gets has have instead into
    its not off one only other out per same some than that the then this two use used using
    via was when with without you your
    """.split()  # noqa: SIM905 (a list of words reads better as words)
)


def _words(hit: SearchHit) -> list[str]:
    seen: dict[str, None] = {}
    for text in (hit.title, hit.summary):
        for word in _WORD.findall(text):
            lowered = word.lower().strip(".")
            if len(lowered) > 2 and lowered not in _PLAIN:
                seen.setdefault(lowered)
    return list(seen)


def tell_apart(hits: Sequence[SearchHit]) -> list[TellApart]:
    """For each hit, the words of its title and summary that no other hit's hold."""
    words = [_words(hit) for hit in hits]
    told = []
    for i, hit in enumerate(hits):
        others = {w for j, ws in enumerate(words) if j != i for w in ws}
        own = [w for w in words[i] if w not in others][:MAX_WORDS]
        told.append(TellApart(hit.id, hit.title, hit.summary, hit.kind, own))
    return told


def ambiguity_of(hits: Sequence[SearchHit], cjk: bool) -> Ambiguity | None:
    """The two or three best hits when they score about equally, with what tells them apart;
    None when one hit stands out or many fit alike."""
    if len(hits) < 2 or hits[0].score <= 0:
        return None
    share = CJK_SHARE if cjk else SHARE
    lowest = share * hits[0].score
    group = [hit for hit in hits[: MAX_GROUP + 1] if hit.score >= lowest]
    if not 2 <= len(group) <= MAX_GROUP:
        return None
    return among(group)


def among(group: Sequence[SearchHit]) -> Ambiguity:
    """These entries, said to fit alike, each with what tells it apart."""
    count = "Two" if len(group) == 2 else "Three"
    message = f"{count} entries fit this about equally; what tells them apart:"
    return Ambiguity(message, tell_apart(group))
