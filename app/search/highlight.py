"""Highlights: the sentence of a hit that holds most of the query's terms, each in a <mark>.

Terms are index terms (words, identifiers, stems, CJK bigrams), so the text is searched for
them as substrings, never analyzed again; the output is escaped HTML. A snippet is one
sentence (`best_sentence`), trimmed around its marks when it is long, so it never repeats
itself; a Chinese query's snippet is a sentence with Chinese in it where the hit has one.
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


def _found_spans(
    text: str, terms: tuple[str, ...], max_spans: int = MAX_SPANS
) -> list[tuple[int, int]] | None:
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
        while at >= 0 and kept < 4 * max_spans:
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
            if len(spans) >= max_spans:
                break
        elif spans and end > reached:  # overlapping bigrams (显存, 存不): one mark
            spans[-1] = (spans[-1][0], end)
            reached = end
    return spans


def mark_terms(text: str, terms: tuple[str, ...], fragments: int = MAX_FRAGMENTS) -> str:
    """Escaped HTML of up to `fragments` fragments of `text` around the first places the
    terms occur, each occurrence in `<mark class="match termN">`; "" when none occurs."""
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
    pieces: list[str] = []
    i = 0
    while i < len(spans) and len(pieces) < fragments:
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
        pieces.append("".join(out).strip())
    return " … ".join(pieces)


# A sentence ends at a line break, at ". ", "? ", "! ", "; " (not after "e.g." and the like) or
# at Chinese end punctuation.
SENTENCE_SPANS = 24  # marks looked for in one field when choosing its sentence


def _term_number(word: str, order: dict[str, int]) -> int:
    return next((n for term, n in order.items() if word.startswith(term[:-1] or term)), 0)


_ENDS_BEFORE = (". ", "? ", "! ", "; ", "。", "！", "？", "；")
_NOT_ENDS = ("e.g.", "i.e.", "vs.", "etc.")
SENTENCE_REACH = 400  # characters looked at on each side of a mark for its sentence's ends


def _sentence_around(text: str, at: int, end: int) -> tuple[int, int]:
    """The sentence of `text` holding text[at:end], found near it (never a split of all of
    `text`: a hit's body is long and most of it holds no mark)."""
    reach = max(0, at - SENTENCE_REACH)
    start = max(reach, text.rfind("\n", reach, at) + 1)
    for mark in _ENDS_BEFORE:  # str.rfind: a regex walking back over the text costs more
        found = text.rfind(mark, start, at)
        while found > start and text[max(0, found - 4) : found + 1].lower().endswith(_NOT_ENDS):
            found = text.rfind(mark, start, found)
        if found >= start:
            start = found + len(mark)
    stop = min(len(text), end + SENTENCE_REACH)
    for mark in ("\n", *_ENDS_BEFORE):
        found = text.find(mark, end, stop)
        while found >= 0 and text[max(0, found - 4) : found + 1].lower().endswith(_NOT_ENDS):
            found = text.find(mark, found + 1, stop)
        if found >= 0:
            stop = found + (mark != "\n")  # the end's punctuation stays with its sentence
    return start, stop


def best_sentence(fields: list[tuple[str, tuple[str, ...]]], cjk: bool) -> str:
    """The marked sentence, among the texts of `fields` (each with its own terms, in order of
    preference), that holds the most distinct terms, in the query's script (`cjk`: with Chinese
    terms marked; otherwise without Chinese); "" when no sentence holds a term."""
    best: tuple[tuple[int, int, int, int], str, tuple[str, ...]] | None = None
    for rank, (text, terms) in enumerate(fields):
        if not text or not terms:
            continue
        spans = _found_spans(text, terms, SENTENCE_SPANS)
        if spans is None:
            spans = [m.span() for m in _term_pattern(terms).finditer(text)][:SENTENCE_SPANS]
        if not spans:
            continue
        order = {term: n for n, term in enumerate(dict.fromkeys(terms))}
        sentence_end, index = -1, 0
        numbers: set[int] = set()
        script = False
        for at, (span_start, span_end) in enumerate(spans):
            if span_start >= sentence_end:
                sentence_start, sentence_end = _sentence_around(text, span_start, span_end)
                numbers, script, index = set(), False, index + 1
            word = text[span_start:span_end]
            numbers.add(_term_number(word.lower(), order))
            script = script or (cjk and bool(_CJK_TERM.search(word)))
            if at + 1 < len(spans) and spans[at + 1][0] < sentence_end:
                continue  # the next mark is in the same sentence
            sentence = text[sentence_start:sentence_end]
            in_script = script if cjk else not _CJK_TERM.search(sentence)
            key = (int(in_script), len(numbers), -rank, -index)
            if best is None or key > best[0]:
                best = (key, sentence, terms)
    if best is None:
        return ""
    return mark_terms(best[1].strip(), best[2], fragments=1)
