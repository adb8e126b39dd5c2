"""Intent words: what a question asks ("how to", "why", "怎么办", "请问"), apart from what it is
about.

A title such as "how to freeze layers" or "显存不足怎么办" says it is a question and then what
it is about. The asking words are in many entries' questions and bodies ("how to …", "为什么
…"), so searched as content they rank entries for being phrased as answers, not for their
subject. `without_intent` takes them out of the text a search reads; the query as typed is
what the reader sees, and a query of intent words alone ("why") is searched as typed.

Only plain words are read here: text in quotes, field parts (`title:how`) and excluded words
(`-why`) are left as typed. Chinese intent phrases are cut out of a run of Chinese before it
is read as bigrams, so "怎么" never becomes the bigrams 怎么 and the one that straddles it.
"""

import re

ENGLISH = frozenset(
    """
    anybody anyone could did do does doing fix fixing guys help how i id im issue issues ive
    me mine my please pls plz possible problem problems resolve should solution solve solved
    solving somebody someone strange thanks way ways weird what whats where which who whom
    why would
    """.split()  # noqa: SIM905 (a list of words reads better as words)
)
# Longest first, so 怎么解决 goes whole rather than leaving 解决.
CHINESE = sorted(
    """
    怎么解决 怎么回事 怎么处理 如何解决 如何处理 为什么会 什么原因 什么意思 有没有人 解决方法
    解决办法 解决方案 怎么办 怎么弄 怎么样 为什么 是什么 求大神 大神们 有没有
    的问题 急急急 在线等 怎么 怎样 如何 为何 请问 求助 求解
    大神 各位 问题 谢谢
    """.split(),  # noqa: SIM905
    key=len,
    reverse=True,
)
# An intent word, with the "to" that follows it ("how to", "way to"): "to" is not a stop word
# in every field (ids hold it: `float-to-long-cast`).
_ENGLISH_WORD = re.compile(
    r"(?<![\w:*\-])(?P<word>[A-Za-z]+)(?:['’][A-Za-z]+)?(?:\s+to)?(?![\w:*'’\-])"
)
_CHINESE = re.compile("|".join(map(re.escape, CHINESE)))
_QUOTED = re.compile(r"\"[^\"]*\"?|“[^”]*”?")
_FIELD_OR_EXCLUDED = re.compile(r"(?:^|(?<=\s))(?:-|[A-Za-z_]+:)\S*")


def _strip_plain(text: str) -> str:
    def english(match: re.Match[str]) -> str:
        return " " if match.group("word").lower() in ENGLISH else match.group()

    return _CHINESE.sub(" ", _ENGLISH_WORD.sub(english, text))


def without_intent(text: str) -> str:
    """`text` without its intent words, or `text` itself when nothing else would be left."""
    kept: list[str] = []
    at = 0
    protected = sorted(
        [m.span() for m in _QUOTED.finditer(text)]
        + [m.span() for m in _FIELD_OR_EXCLUDED.finditer(text)]
    )
    for start, end in protected:
        if start < at:
            continue  # inside a span already kept
        kept.append(_strip_plain(text[at:start]))
        kept.append(f" {text[start:end]} ")
        at = end
    kept.append(_strip_plain(text[at:]))
    stripped = " ".join("".join(kept).split())
    return stripped if re.search(r"\w", stripped) else text
