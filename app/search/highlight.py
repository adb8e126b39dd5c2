"""Highlights: the fragments of a hit's text around the query's terms, each term in a <mark>.

Terms are index terms (words, identifiers, stems, CJK bigrams), so the text is searched for
them as substrings, never analyzed again; the output is escaped HTML.
"""

import html
import re
from functools import lru_cache

_CJK_TERM = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
FRAGMENT_CHARS = 180  # the longest fragment, from its first mark to its last
SURROUND_CHARS = 50  # text kept on each side of a fragment's marks
MAX_FRAGMENTS = 2


@lru_cache(maxsize=512)
def _term_pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for every term, each as the start of a word (CJK anywhere). Porter turns a
    final y into i (memory: memori), so a stem ending in i also takes y."""
    alternatives = []
    for term in sorted(set(terms), key=len, reverse=True):
        if _CJK_TERM.search(term):
            alternatives.append(re.escape(term))
            continue
        body = re.escape(term)
        if term.isalpha() and term.endswith("i") and len(term) > 2:
            body = re.escape(term[:-1]) + "[iy]"
        # A word's start: after a space, punctuation or an identifier's "_" or ".".
        alternatives.append(rf"(?<![A-Za-z0-9]){body}[\w]*" if term[:1].isalnum() else body)
    return re.compile("|".join(alternatives), re.IGNORECASE)


MAX_SPANS = 16  # marks looked for in one text
_WORD_TAIL = re.compile(r"\w*")


def _found_spans(text: str, terms: tuple[str, ...]) -> list[tuple[int, int]] | None:
    """Where `_term_pattern(terms)` matches in `text`, found with `str.find` on the lowered
    text instead: compiling that pattern cost more than the search on a new query. None when
    lowering changes the text's length (then offsets would not line up)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        return None
    candidates: list[tuple[int, int, int]] = []
    for rank, term in enumerate(sorted(set(terms), key=len, reverse=True)):
        needle = term.lower()
        cjk = bool(_CJK_TERM.search(term))
        stem_i = not cjk and term.isalpha() and term.endswith("i") and len(term) > 2
        if stem_i:
            needle = needle[:-1]
        word = not cjk and term[:1].isalnum()
        at, kept = lowered.find(needle), 0
        while at >= 0 and kept < 4 * MAX_SPANS:
            end = at + len(needle)
            stem_fits = not stem_i or lowered[end : end + 1] in ("i", "y")
            starts_word = (
                not word or not at or not text[at - 1].isascii() or not text[at - 1].isalnum()
            )
            if stem_fits and starts_word:
                end = end + 1 if stem_i else end
                if word and (tail := _WORD_TAIL.match(text, end)):  # \w* matches anywhere
                    end = tail.end()
                candidates.append((at, rank, end))
                kept += 1
            at = lowered.find(needle, at + 1)
    candidates.sort()
    spans: list[tuple[int, int]] = []
    reached = 0
    for start, _rank, end in candidates:
        if start >= reached and end > start:
            spans.append((start, end))
            reached = end
            if len(spans) >= MAX_SPANS:
                break
    return spans


def mark_terms(text: str, terms: tuple[str, ...]) -> str:
    """Escaped HTML of up to two fragments of `text` around the first places the terms occur,
    each occurrence in `<mark class="match termN">`; "" when none occurs."""
    terms = tuple(terms)
    found = _found_spans(text, terms)
    if found is None:
        found = [m.span() for m in _term_pattern(terms).finditer(text)][:MAX_SPANS]
    order = {term: n for n, term in enumerate(dict.fromkeys(terms))}
    spans: list[tuple[int, int, int]] = []
    for start, end in found:
        word = text[start:end].lower()
        number = next((n for term, n in order.items() if word.startswith(term[:-1] or term)), 0)
        spans.append((start, end, number))
    if not spans:
        return ""
    fragments: list[str] = []
    i = 0
    while i < len(spans) and len(fragments) < MAX_FRAGMENTS:
        first = spans[i][0]
        group = [spans[i]]
        i += 1
        while i < len(spans) and spans[i][1] - first <= FRAGMENT_CHARS:
            group.append(spans[i])
            i += 1
        begin = max(0, first - SURROUND_CHARS)
        if begin:
            space = text.find(" ", begin, first)
            begin = space + 1 if space >= 0 else begin
        finish = min(len(text), group[-1][1] + SURROUND_CHARS)
        if finish < len(text):
            space = text.rfind(" ", group[-1][1], finish)
            finish = space if space >= 0 else finish
        out, at = [], begin
        for start, end, number in group:
            out.append(html.escape(text[at:start], quote=False))
            mark = html.escape(text[start:end], quote=False)
            out.append(f'<mark class="match term{number}">{mark}</mark>')
            at = end
        out.append(html.escape(text[at:finish], quote=False))
        fragments.append("".join(out).strip())
    return " … ".join(fragments)
