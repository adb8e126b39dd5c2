"""Two revisions side by side, line against line, with the changed parts of a changed line
marked: the diff page shows this beside the raw unified diff."""

import difflib
from dataclasses import dataclass
from itertools import zip_longest

from markupsafe import Markup, escape

CONTEXT_LINES = 3
NOTHING = Markup("")
# Marking inside a line compares its characters, in time that grows with the product of the two
# lengths: past this, the whole line is marked instead.
MAX_INLINE_CHARS = 2000


@dataclass(frozen=True)
class DiffRow:
    kind: str  # same | changed | removed | added | gap (unchanged lines left out)
    old_number: int | None = None
    old_html: Markup = NOTHING
    new_number: int | None = None
    new_html: Markup = NOTHING


def _marked(old: str, new: str) -> tuple[Markup, Markup]:
    """Both lines escaped, with what differs between them in <del> and <ins>."""
    if len(old) > MAX_INLINE_CHARS or len(new) > MAX_INLINE_CHARS:
        return Markup("<del>%s</del>") % old, Markup("<ins>%s</ins>") % new
    before, after = [], []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            before.append(escape(old[i1:i2]))
            after.append(escape(new[j1:j2]))
            continue
        if i2 > i1:
            before.append(Markup("<del>%s</del>") % old[i1:i2])
        if j2 > j1:
            after.append(Markup("<ins>%s</ins>") % new[j1:j2])
    return NOTHING.join(before), NOTHING.join(after)


def side_by_side(old: str, new: str, *, context: int = CONTEXT_LINES) -> list[DiffRow]:
    """Rows of (old line, new line) around each change, `context` unchanged lines either side,
    a gap row where unchanged lines are left out; no rows when the texts are the same."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[DiffRow] = []
    shown_to = 0  # the old text's lines up to here are shown or deliberately left out
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        if group[0][1] > shown_to:
            rows.append(DiffRow("gap"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [
                    DiffRow("same", i + 1, escape(a[i]), j + 1, escape(b[j]))
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                ]
                continue
            for i, j in zip_longest(range(i1, i2), range(j1, j2)):
                if i is not None and j is not None:
                    old_html, new_html = _marked(a[i], b[j])
                    rows.append(DiffRow("changed", i + 1, old_html, j + 1, new_html))
                elif i is not None:
                    rows.append(DiffRow("removed", old_number=i + 1, old_html=escape(a[i])))
                else:
                    assert j is not None
                    rows.append(DiffRow("added", new_number=j + 1, new_html=escape(b[j])))
        shown_to = group[-1][2]
    if rows and shown_to < len(a):
        rows.append(DiffRow("gap"))
    return rows
