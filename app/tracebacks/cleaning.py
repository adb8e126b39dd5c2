"""Cleaning a paste before it is read: the wrapping around the text (Markdown fences, quotes,
HTML entities, colour codes, escaped newlines, a flattened traceback) and the prefixes on its
lines (ranks, timestamps, loggers, pytest, pdb, exception groups, rich's boxes).

Every regex here is anchored and simple: cleaning runs in linear time on any paste.
"""

import html
import re
import textwrap

from app.budget import check_budget

# A longer line is cut to its first characters: they hold what a signature reads, and the
# structure regexes then cost the same on a crafted megabyte-long line as on a real one.
MAX_LINE_CHARS = 20_000

# ---- cleaning --------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FENCE = re.compile(r"^\s*(```|~~~)[\w+-]*\s*$")
_AUTOLINK = re.compile(r"<((?:https?|file)://[^<>\s]+)>")
_MD_LINK = re.compile(
    r"\[([^\[\]\n]{1,500})\]\((?:file|https?|vscode[\w-]*)://[^()\[\]\s]{0,2000}\)"
)
_ENTITY = re.compile(r"&(?:quot|lt|gt|amp|apos|#\d{1,6}|#x[0-9a-fA-F]{1,6});")
_ESCAPED_TRACEBACK = re.compile(r"\\n(?:Traceback \(most recent|  File \"|Original Traceback)")
# A repr with escaped newlines: RuntimeError('...\n...'). Searched only when the text has
# "Error(" or "Exception(" at all: without a literal to start from, the scan of a megabyte
# holds the GIL for ~30 ms.
_ESCAPED_REPR = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\((?:\\?['\"])")
# A whole paste in single backticks (`Traceback ... Error: message`): the ticks are not the message.
_TICKED = re.compile(r"^\s*`(?!`)(?P<body>[\s\S]*[^`])`\s*$")


# What forums and chat make of the characters an error prints: curly quotes, dashes, nbsp.
_TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u00a0": " ",
        "\u202f": " ",
    }
)


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    text = text.translate(_TYPOGRAPHY)
    text = _ANSI.sub("", text)
    text = _CONTROL.sub("", text)
    if _ENTITY.search(text):
        text = html.unescape(text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    if _ESCAPED_TRACEBACK.search(text) or (
        ("Error(" in text or "Exception(" in text) and _ESCAPED_REPR.search(text)
    ):
        # A traceback embedded in a message with literal \n (a repr, a JSON log field).
        text = text.replace("\\r\\n", "\n").replace("\\n", "\n").replace("\\t", "\t")
        text = text.replace('\\"', '"').replace("\\'", "'")
    lines = [_cut(line) for line in text.split("\n") if not _FENCE.match(line)]
    text = "\n".join(lines)
    if _FLAT_HEADER.search(text):
        text = "\n".join(_unflatten(line) for line in text.split("\n"))
    if text.count("`") == 2 and (ticked := _TICKED.match(text)):
        text = ticked.group("body")
    return text


# A traceback whose line breaks were lost (copied from a page that flattened it): the header and
# every frame on one line. `_unflatten` puts each frame, its code and the final exception back on
# lines of their own.
_FLAT_HEADER = re.compile(r'Traceback \(most recent call last\):[ \t]*(?=File ")')
_FLAT_FRAME = re.compile(
    r'[ \t]*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+?)(?=\s|File "|$)[ \t]*'
)
_FLAT_EXCEPTION = re.compile(
    r"(?:^|\s)(?P<exception>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)"
    r"|StopIteration)(?=:\s|:?\s*$)"
)


def _unflatten(line: str) -> str:
    header = _FLAT_HEADER.search(line)
    if header is None:
        return line
    out = [line[: header.start()].rstrip(), "Traceback (most recent call last):"]
    frames = list(_FLAT_FRAME.finditer(line, header.end()))
    for index, frame in enumerate(frames):
        end = frames[index + 1].start() if index + 1 < len(frames) else len(line)
        out.append(f'  File "{frame["file"]}", line {frame["line"]}, in {frame["func"]}')
        rest = line[frame.end() : end].strip()
        if index + 1 == len(frames) and (raised := _FLAT_EXCEPTION.search(rest)):
            # The last code line runs into the exception: `raise StopIteration StopIteration`.
            rest, final = rest[: raised.start()].strip(), rest[raised.start("exception") :]
            out.extend([f"    {rest}"] if rest else [])
            out.append(final)
        elif rest:
            out.append(f"    {rest}")
    return "\n".join(part for part in out if part)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


def _valid_unicode(text: str) -> str:
    """Lone surrogates (from JSON `\\ud800`) become U+FFFD: UTF-8 has no bytes for them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


# ---- per-line prefixes -------------------------------------------------------------------------

_TIMESTAMP = (
    r"(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?"
    r"|\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?|[A-Z][a-z]{2} \d{1,2} \d{2}:\d{2}:\d{2})"
)
_LEVEL = r"(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL|E|W|I)"
# Each: (name, regex of the prefix). Applied in order, repeatedly, to every line.
_PREFIXES: list[tuple[str, re.Pattern[str]]] = [
    ("quote", re.compile(r"^(?:> ?)+")),
    ("rank", re.compile(r"^(?:\[(?:rank|default|Rank)\s?\d+\]:?\s?)+")),  # also stacked
    ("rank", re.compile(r"^(?:rank|Rank)\s?\d+:\s")),
    # `2024-05-01 12:00:00,123 - train - ERROR - `: every token is followed by - or |.
    (
        "logger",
        re.compile(
            rf"^{_TIMESTAMP}\s*(?:[-|]\s*)?(?:(?:[\w.<>]+|\[[^\]]{{1,80}}\])\s*[-|]\s*){{0,4}}"
        ),
    ),
    # glog, as torchrun prints: `W1121 09:18:36.015000 8099 torch/distributed/run.py:874] `
    ("logger", re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+[^\]\s]+\]\s?")),
    # `[2024-05-01 12:00:00] ERROR: ` or `12:00:00 `
    ("logger", re.compile(rf"^{_TIMESTAMP}\s*(?:\[?{_LEVEL}\]?\s*[:|-]?\s)?")),
    ("logger", re.compile(rf"^{_LEVEL}:[\w.<>-]*:")),
    ("logger", re.compile(rf"^\[?{_LEVEL}\]?\s+[-|:]\s")),
    ("pytest", re.compile(r"^E {3,7}")),
    ("pdb", re.compile(r"^\*\*\* ")),
    ("group", re.compile(r"^\s*(?:\| )+")),
    ("rich", re.compile(r"^\s*[│┃|](?= )|[│┃]\s*$")),
]
_ALWAYS_STRIPPED = ("quote", "rank", "pytest", "pdb")  # distinctive enough to strip from one line
_GROUP_RULE = re.compile(r"^\s*\+[-+]+(?:\s+\d+\s+-+|\s*\.\.\.\s*-+)?\s*$|^\s*\+-+\s*$")
_RICH_RULE = re.compile(r"^\s*[╭╰┏┗][─━ \w().,:-]*[╮╯┓┛]\s*$|^\s*[─━]{3,}.*$")


def _strip_prefixes(text: str) -> tuple[str, list[str]]:
    lines = text.split("\n")
    used: list[str] = []
    nonblank = [line for line in lines if line.strip()] or [""]
    for name, pattern in _PREFIXES:
        check_budget()
        hits = sum(1 for line in nonblank if pattern.match(line))
        # A prefix is stripped when it is common in the paste; one stray match is left alone,
        # except for quotes and ranks, which no traceback line starts with by itself.
        common = hits == len(nonblank) or hits >= max(2, len(nonblank) // 5)
        if hits == 0 or not (common or name in _ALWAYS_STRIPPED):
            continue
        used.append(name)
        lines = [pattern.sub("", line, count=1) for line in lines]
        nonblank = [line for line in lines if line.strip()] or [""]
    if any(_GROUP_RULE.match(line) for line in lines):
        lines = [line for line in lines if not _GROUP_RULE.match(line)]
        used.append("group")
    if any(_RICH_RULE.match(line) for line in lines):
        lines = [line for line in lines if not _RICH_RULE.match(line)]
        used.append("rich")
    text = textwrap.dedent("\n".join(line.rstrip() for line in lines))
    return text, list(dict.fromkeys(used))
