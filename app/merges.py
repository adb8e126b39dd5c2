"""Three-way merge of two edits of one text (diff3): what a save made from an older revision
becomes when someone else saved in between.

Texts are compared line by line, each side against the common base. A stretch of the base that
only one side changed takes that side's lines; a stretch both sides changed the same way is taken
once; a stretch both sides changed differently is a conflict, and then there is no merged text
at all. Changes to adjacent lines (with no unchanged line between them) fall in one stretch, so
they conflict too: a merge never has to guess how two neighbouring edits fit together.

Line endings are not part of a line: CRLF (what browsers send from a textarea) and LF compare
equal, and the merged text takes the ending style, and the final newline or its absence, that
one side changed and the other did not. A lone CR stays inside its line.
"""

import difflib
import re
from dataclasses import dataclass

_NEWLINE = re.compile(r"\r\n|\n")


@dataclass(frozen=True)
class Conflict:
    """A stretch both sides changed differently, as 1-based line ranges (start, end inclusive;
    an empty range, an insertion, has end = start - 1)."""

    base_lines: tuple[int, int]
    ours_lines: tuple[int, int]
    theirs_lines: tuple[int, int]


@dataclass(frozen=True)
class MergeResult:
    text: str | None  # None when there is a conflict
    conflicts: tuple[Conflict, ...]

    @property
    def clean(self) -> bool:
        return not self.conflicts


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


def _sync_regions(base: list[str], ours: list[str], theirs: list[str]):
    """Stretches of the base that neither side changed, with where they sit in each side:
    (base_start, base_end, ours_start, theirs_start), ending with an empty one at the end."""
    ours_blocks = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_matching_blocks()
    theirs_blocks = difflib.SequenceMatcher(
        None, base, theirs, autojunk=False
    ).get_matching_blocks()
    regions = []
    i = j = 0
    # The last block of each list is the empty sentinel at the ends; stop before it.
    while i < len(ours_blocks) - 1 and j < len(theirs_blocks) - 1:
        o, t = ours_blocks[i], theirs_blocks[j]
        start, end = max(o.a, t.a), min(o.a + o.size, t.a + t.size)
        if start < end:
            regions.append((start, end, o.b + start - o.a, t.b + start - t.a))
        if o.a + o.size < t.a + t.size:
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
    for bs, be, os_, ts in _sync_regions(b.lines, o.lines, t.lines):
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
