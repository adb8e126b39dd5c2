"""Three-way merge of two edits of one text (diff3): what a save made from an older revision
becomes when someone else saved in between.

Texts are compared line by line, each side against the common base. A stretch of the base that
only one side changed takes that side's lines; a stretch both sides changed the same way is taken
once; a stretch both sides changed differently is a conflict, and then there is no merged text
at all. Changes to adjacent lines (with no unchanged line between them) fall in one stretch, so
they conflict too: a merge never has to guess how two neighbouring edits fit together.

Matching is bounded: after the lines both texts start and end with are set aside, a pair whose
remaining lines repeat so much that matching them would take long (`MAX_MATCH_WORK`) is not
merged at all (`MergeResult.too_repetitive`), and the save is refused as a conflict.

Line endings are not part of a line: CRLF (what browsers send from a textarea) and LF compare
equal, and the merged text takes the ending style, and the final newline or its absence, that
one side changed and the other did not. A lone CR stays inside its line.
"""

import difflib
import re
from collections import Counter
from dataclasses import dataclass

_NEWLINE = re.compile(r"\r\n|\n")
# Line pairs the matcher may have to compare (a line's copies on one side times its copies on
# the other, summed): difflib's time grows with it, about a second at 300,000 on a busy core.
# Real entries stay far below (a few thousand: blank lines and code fences); only an entry of
# hundreds of identical lines, edited in many places, comes near.
MAX_MATCH_WORK = 200_000


@dataclass(frozen=True)
class Conflict:
    """A stretch both sides changed differently, as 1-based line ranges (start, end inclusive;
    an empty range, an insertion, has end = start - 1)."""

    base_lines: tuple[int, int]
    ours_lines: tuple[int, int]
    theirs_lines: tuple[int, int]


@dataclass(frozen=True)
class MergeResult:
    text: str | None  # None when there is a conflict, or the texts are too repetitive
    conflicts: tuple[Conflict, ...]
    too_repetitive: bool = False  # not merged: matching the lines would take too long

    @property
    def clean(self) -> bool:
        return self.text is not None


@dataclass(frozen=True)
class _Lines:
    lines: list[str]
    newline: str  # "\r\n" or "\n"
    final_newline: bool

    @classmethod
    def of(cls, text: str) -> "_Lines":
        lines = _NEWLINE.split(text)
        final = lines[-1] == ""
        if final:
            lines.pop()
        newline = "\r\n" if "\r\n" in text and text.count("\r\n") * 2 >= text.count("\n") else "\n"
        return cls(lines, newline, final or not text)


def _pick(base, ours, theirs):
    """The side that changed a single value; ours when both did."""
    return theirs if ours == base else ours


_Block = tuple[int, int, int]  # (start in the base, start in the side, length)


class _TooRepetitive(Exception):
    pass


def _matching_blocks(base: list[str], side: list[str], budget: list[int]) -> list[_Block]:
    """The lines `side` kept from `base`, as blocks in order; the common start and end are
    taken as they are, and only the middle goes to difflib, while `budget` lasts."""
    limit = min(len(base), len(side))
    head = 0
    while head < limit and base[head] == side[head]:
        head += 1
    tail = 0
    while tail < limit - head and base[-1 - tail] == side[-1 - tail]:
        tail += 1
    middle_base, middle_side = base[head : len(base) - tail], side[head : len(side) - tail]
    counts = Counter(middle_side)
    budget[0] -= sum(n * counts[line] for line, n in Counter(middle_base).items())
    if budget[0] < 0:
        raise _TooRepetitive
    matcher = difflib.SequenceMatcher(None, middle_base, middle_side, autojunk=False)
    blocks = [(0, 0, head)] if head else []
    blocks += [(a + head, b + head, n) for a, b, n in matcher.get_matching_blocks() if n]
    if tail:
        blocks.append((len(base) - tail, len(side) - tail, tail))
    return blocks


def _sync_regions(base: list[str], ours: list[str], theirs: list[str]):
    """Stretches of the base that neither side changed, with where they sit in each side:
    (base_start, base_end, ours_start, theirs_start), ending with an empty one at the end."""
    budget = [MAX_MATCH_WORK]
    ours_blocks = _matching_blocks(base, ours, budget)
    theirs_blocks = _matching_blocks(base, theirs, budget)
    regions = []
    i = j = 0
    while i < len(ours_blocks) and j < len(theirs_blocks):
        (oa, ob, on), (ta, tb, tn) = ours_blocks[i], theirs_blocks[j]
        start, end = max(oa, ta), min(oa + on, ta + tn)
        if start < end:
            regions.append((start, end, ob + start - oa, tb + start - ta))
        if oa + on < ta + tn:
            i += 1
        else:
            j += 1
    regions.append((len(base), len(base), len(ours), len(theirs)))
    return regions


def _span(start: int, end: int) -> tuple[int, int]:
    return (start + 1, end)


def three_way_merge(base: str, ours: str, theirs: str) -> MergeResult:
    """Merge the change base -> ours with the change base -> theirs."""
    b, o, t = _Lines.of(base), _Lines.of(ours), _Lines.of(theirs)
    merged: list[str] = []
    conflicts: list[Conflict] = []
    bz = oz = tz = 0  # where the stretch after the last unchanged one starts, in each text
    try:
        regions = _sync_regions(b.lines, o.lines, t.lines)
    except _TooRepetitive:
        return MergeResult(None, (), too_repetitive=True)
    for bs, be, os_, ts in regions:
        base_part, ours_part, theirs_part = b.lines[bz:bs], o.lines[oz:os_], t.lines[tz:ts]
        if ours_part == base_part:
            merged += theirs_part
        elif theirs_part == base_part or ours_part == theirs_part:
            merged += ours_part
        else:
            conflicts.append(Conflict(_span(bz, bs), _span(oz, os_), _span(tz, ts)))
        merged += b.lines[bs:be]
        bz, oz, tz = be, os_ + (be - bs), ts + (be - bs)
    if conflicts:
        return MergeResult(None, tuple(conflicts))
    newline = _pick(b.newline, o.newline, t.newline)
    final = _pick(b.final_newline, o.final_newline, t.final_newline)
    text = newline.join(merged) + (newline if final and merged else "")
    return MergeResult(text, ())
