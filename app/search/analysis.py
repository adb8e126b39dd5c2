"""Text analysis for the search index: code identifiers kept whole and split, CJK segmented.

`torch.cuda.FloatTensor` is indexed as itself and as `torch`, `cuda`, `floattensor`, `float`,
`tensor`; `bn1.num_batches_tracked` also as `num_batches_tracked`, `batches`, `tracked`. A query
keeps a typed identifier whole, so it finds the name exactly, while plain words find its parts.
CJK runs become overlapping bigrams (plus single characters in documents), so 显存 finds 显存不足.
"""

import re
from collections.abc import Iterator
from functools import lru_cache

from whoosh.analysis import (
    Filter,
    LowercaseFilter,
    RegexTokenizer,
    StopFilter,
    Token,
    Tokenizer,
)
from whoosh.lang.porter import stem

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W{_CJK}]+(?:\.[^\W{_CJK}]+)*)")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+")
_PLAIN_WORD = re.compile(r"^[a-z]+$")


def _split_parts(word: str, start: int) -> tuple[list[tuple[str, int, int, int]], int]:
    """Sub-names of a dotted/underscored/camelCase word: (text, start, end, first leaf index).

    Leaves (the finest parts) get consecutive positions so that phrases over parts still work;
    coarser parts share the position of their first leaf.
    """
    if "." not in word and "_" not in word and (word.islower() or word[1:].islower()):
        return [], 1  # a plain word: the common case, kept fast
    parts: list[tuple[str, int, int, int]] = []
    leaves = 0
    segments = [(m.group(), m.start()) for m in re.finditer(r"[^.]+", word)]
    for segment, seg_start in segments:
        pieces = [(m.group(), m.start()) for m in re.finditer(r"[^_]+", segment)]
        if len(segments) > 1:
            parts.append((segment, start + seg_start, start + seg_start + len(segment), leaves))
        for piece, piece_start in pieces:
            camel = [(m.group(), m.start()) for m in _CAMEL.finditer(piece)]
            at = start + seg_start + piece_start
            if len(pieces) > 1:
                parts.append((piece, at, at + len(piece), leaves))
            if len(camel) > 1:
                for leaf, leaf_start in camel:
                    parts.append((leaf, at + leaf_start, at + leaf_start + len(leaf), leaves))
                    leaves += 1
            else:
                leaves += 1
    return parts, max(leaves, 1)


class CodeAwareTokenizer(Tokenizer):
    """Words, identifiers (whole and split) and CJK runs (bigrams, or jieba when asked)."""

    def __init__(self, cjk: str = "bigram") -> None:
        if cjk not in ("bigram", "jieba"):
            raise ValueError("cjk must be 'bigram' or 'jieba'")
        self.cjk = cjk

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CodeAwareTokenizer) and other.cjk == self.cjk

    def __hash__(self) -> int:
        return hash((type(self), self.cjk))

    def _cjk_tokens(self, run: str, query: bool) -> list[tuple[str, int, int]]:
        """(text, offset within run, position offset)."""
        if self.cjk == "jieba":
            import jieba  # optional: only the analyzer comparison in bench/ asks for it

            words = jieba.tokenize(run, mode="default" if query else "search")
            return [(w, s, i) for i, (w, s, _e) in enumerate(words)]
        if len(run) == 1:
            return [(run, 0, 0)]
        tokens = [(run[i : i + 2], i, i) for i in range(len(run) - 1)]
        if not query:
            tokens += [(char, i, i) for i, char in enumerate(run)]
        return tokens

    def spans(self, value: str, query: bool = False) -> Iterator[tuple[str, int, int, int]]:
        """(text, start char, end char, position) of each token, as typed (not lowered)."""
        pos = 0
        for match in _TOKEN.finditer(value):
            if match.lastgroup == "cjk":
                run = match.group()
                for text, offset, pos_offset in self._cjk_tokens(run, query):
                    start = match.start() + offset
                    yield text, start, start + len(text), pos + pos_offset
                pos += len(run)
            else:
                word = match.group()
                yield word, match.start(), match.end(), pos
                parts, width = _split_parts(word, match.start())
                if not query:
                    for text, start, end, pos_offset in parts:
                        yield text, start, end, pos + pos_offset
                pos += width

    def __call__(
        self,
        value: str,
        positions: bool = False,
        chars: bool = False,
        keeporiginal: bool = False,
        removestops: bool = True,
        start_pos: int = 0,
        start_char: int = 0,
        tokenize: bool = True,
        mode: str = "",
        **kwargs,
    ) -> Iterator[Token]:
        token = Token(positions, chars, removestops=removestops, mode=mode, **kwargs)
        for text, start, end, pos in self.spans(value, query=mode == "query"):
            token.text = text
            token.boost = 1.0
            token.stopped = False
            if keeporiginal:
                token.original = text
            if positions:
                token.pos = start_pos + pos
            if chars:
                token.startchar = start_char + start
                token.endchar = start_char + end
            yield token


class PlainWordStemFilter(Filter):
    """Porter-stem plain English words only; identifiers and CJK pass through unchanged."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlainWordStemFilter)

    def __hash__(self) -> int:
        return hash(type(self))

    def __call__(self, tokens: Iterator[Token]) -> Iterator[Token]:
        for token in tokens:
            if _PLAIN_WORD.match(token.text):
                token.text = stem_word(token.text)
            yield token


@lru_cache(maxsize=50_000)
def stem_word(word: str) -> str:
    return stem(word)


def code_analyzer(cjk: str = "bigram"):
    """For messages, identifiers and code: no stemming, no stop words."""
    return CodeAwareTokenizer(cjk) | LowercaseFilter()


_SPELLING_WORD = r"[A-Za-z]{3,}"


def spelling_analyzer():
    """Plain words for "did you mean": cheap, since every text of an entry goes through it."""
    return RegexTokenizer(_SPELLING_WORD) | LowercaseFilter()


def spelling_words(text: str) -> list[str]:
    """What `spelling_analyzer` makes of `text`, without Whoosh's token objects."""
    return [word.lower() for word in re.findall(_SPELLING_WORD, text)]


def prose_analyzer(cjk: str = "bigram"):
    """For titles, summaries and prose: stop words dropped, plain words stemmed."""
    return (
        CodeAwareTokenizer(cjk)
        | LowercaseFilter()
        | StopFilter(minsize=1, renumber=False)
        | PlainWordStemFilter()
    )


# What a word becomes in a document, by (stop list, word): words repeat across entries, so a
# large reindex works each one out once. Bounded: emptied when it grows past this.
_WORD_CACHE: dict[tuple, tuple[tuple[tuple[str, int, int, int], ...], int]] = {}
_WORD_CACHE_SIZE = 200_000


def _finished(token: str, stoplist: frozenset | None) -> str | None:
    """A token after the analyzer's filters: lowered, and for prose (`stoplist` given) None
    when it is a stop word, else Porter-stemmed when it is a plain word."""
    token = token.lower()
    if stoplist is None:
        return token
    if token in stoplist:
        return None
    return stem_word(token) if _PLAIN_WORD.match(token) else token


def _word_tokens(
    word: str, stoplist: frozenset | None
) -> tuple[tuple[tuple[str, int, int, int], ...], int]:
    """A word's tokens (text, start, end, position offset), relative to the word, and its
    width in positions."""
    key = (stoplist, word)
    found = _WORD_CACHE.get(key)
    if found is not None:
        return found
    parts, width = _split_parts(word, 0)
    tokens = []
    for text, start, end, pos_offset in [(word, 0, len(word), 0), *parts]:
        finished = _finished(text, stoplist)
        if finished is not None:
            tokens.append((finished, start, end, pos_offset))
    if len(_WORD_CACHE) >= _WORD_CACHE_SIZE:
        _WORD_CACHE.clear()
    found = _WORD_CACHE[key] = (tuple(tokens), width)
    return found


def document_tokens(analyzer, text: str) -> list[tuple[str, int, int, int]] | None:
    """What `analyzer` (`code_analyzer` or `prose_analyzer`) makes of a document's `text`, as
    (text, position, start char, end char), without Whoosh's token objects and generator
    chain, which were most of the time a large reindex took; None for any other analyzer."""
    items = getattr(analyzer, "items", ())
    if not items or not isinstance(items[0], CodeAwareTokenizer):
        return None
    tokenizer = items[0]
    rest = [type(item) for item in items[1:]]
    if rest == [LowercaseFilter]:
        stoplist = None
    elif rest == [LowercaseFilter, StopFilter, PlainWordStemFilter]:
        stop = items[2]
        if stop.renumber or stop.min != 1 or stop.max is not None:
            return None
        stoplist = stop.stops
    else:
        return None
    out = []
    pos = 0
    for match in _TOKEN.finditer(text):
        at = match.start()
        if match.lastgroup == "cjk":
            run = match.group()
            for token, offset, pos_offset in tokenizer._cjk_tokens(run, False):
                finished = _finished(token, stoplist)
                if finished is not None:
                    out.append((finished, pos + pos_offset, at + offset, at + offset + len(token)))
            pos += len(run)
            continue
        tokens, width = _word_tokens(match.group(), stoplist)
        for token, start, end, pos_offset in tokens:
            out.append((token, pos + pos_offset, at + start, at + end))
        pos += width
    return out
