"""Reading whatever people paste: tracebacks in every dialect, turned into structure.

`parse_traceback` never raises and runs in linear time (every regex here is anchored and simple).
It cleans the wrapping (Markdown fences, quotes, HTML entities, colour codes), strips per-line
prefixes (ranks, timestamps, loggers, pytest, pdb), then walks the lines for exceptions, their
frames, chains, DataLoader workers' original tracebacks, C++ errors, warnings and crash dumps.
"""

import re

from app.budget import BudgetExceeded, check_budget
from app.tracebacks.cleaning import _clean, _strip_prefixes, _valid_unicode
from app.tracebacks.results import Frame, ParsedException, ParsedPaste, ParsedWarning
from app.tracebacks.walker import _EXCEPTION, MAX_EXCEPTIONS, _Walker

__all__ = ["Frame", "ParsedException", "ParsedPaste", "ParsedWarning", "parse_traceback"]

MAX_PARSE_CHARS = 2_000_000  # beyond this only the tail is read: the error is at the end
# An exception quoted inside a line of prose, a numbered list or a repr, when the paste has no
# exception line of its own: `I get RuntimeError: CUDA out of memory when ...`, `1. KeyError: 'x'`,
# `RuntimeError('Error(s) in loading state_dict ...')`, `RuntimeError:Cudnn RNN ...` (no space).
# Chinese text runs straight into an error name ("提示AssertionError: …") and may use a
# full-width colon after it ("RuntimeError：…"). The name's characters are ASCII: `\w` would
# also take Chinese, and from every character before a capital the dotted prefix would run to
# the end of the line (quadratic on "中A中A…").
_CJK_BEFORE = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
_QUOTED_EXCEPTION = re.compile(
    rf"(?:^|[\s`'\"(:>*{_CJK_BEFORE}])(?P<type>(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*"
    r"(?:Error|Exception))"
    r"(?::\s+|:(?=[A-Z])|：\s*|\((?P<quote>['\"]))(?P<message>\S.*)$"
)
_QUOTED_END = re.compile(r"[`'\"]\)?[.,;:]?\s*$")
_RANK_LINE = re.compile(r"^\s*\[(?:rank|Rank)\s?(?P<rank>\d+)\]:?\s?(?P<rest>.*)$")
_PY_VERSION = re.compile(r"[/\\]python(?P<v>3\.\d{1,2})[/\\](?:site|dist)-packages")
_PY_VERSION_TEXT = re.compile(r"\bPython (?P<v>3\.\d{1,2}(?:\.\d{1,2})?)\b")
_TORCH_VERSION = re.compile(
    r"\b(?:torch|PyTorch)(?: version)?(?:\s*(?:==|:|=)\s*|\s+)v?"
    r"(?P<v>\d+\.\d+(?:\.\d+)?(?:[+.\w]*)?)"
)


def _versions(text: str) -> tuple[str | None, str | None]:
    python = _PY_VERSION.search(text) or _PY_VERSION_TEXT.search(text)
    torch = _TORCH_VERSION.search(text)
    return (python.group("v") if python else None, torch.group("v") if torch else None)


def _quoted_exceptions(text: str) -> list[ParsedException]:
    """The exception named inside a line of prose, a list or a repr, for a paste with no other:
    the last one named, as in a traceback, so the lines are read from the end."""
    lines = text.split("\n")
    for number in range(len(lines) - 1, -1, -1):
        if number % 64 == 0:
            check_budget()
        match = _QUOTED_EXCEPTION.search(lines[number])
        if match is None:
            continue
        message = match.group("message")
        if quote := match.group("quote"):  # a repr goes on to its closing quote
            parts = [message]
            for line in lines[number + 1 : number + 50]:
                if parts[-1].rstrip().endswith(quote + ")"):
                    break
                parts.append(line)
            message = "\n".join(parts)
            # ... and no further: `RuntimeError("...")` can sit in the middle of a sentence.
            if closing := re.search(rf"(?<!\\){quote}\)", message):
                message = message[: closing.start()]
                quote = None  # closed: nothing after it to strip
        if quote or message.endswith("`"):
            message = _QUOTED_END.sub("", message)
        return [ParsedException(match.group("type"), message.strip(), origin="quoted")]
    return []


def _collapse_ranks(exceptions: list[ParsedException], text: str) -> list[ParsedException]:
    """Every rank printing the same error makes one error, with the ranks that printed it."""
    ranks_of: dict[str, set[int]] = {}
    for line in text.split("\n"):
        match = _RANK_LINE.match(line)
        if match and (line_error := _EXCEPTION.match(match.group("rest").strip())):
            head = (line_error.group("message") or line_error.group("message2") or "")[:200]
            ranks_of.setdefault(head, set()).add(int(match.group("rank")))
    # Keep the last copy, in the place of the last copy: popping and re-inserting moves a key to
    # the end of the dict in constant time (a list's remove() made this quadratic).
    last: dict[tuple[str, str], ParsedException] = {}
    for index, exc in enumerate(exceptions):
        if index % 64 == 0:
            check_budget()
        key = (exc.qualified_type, exc.message)
        last.pop(key, None)
        last[key] = exc
        exc.ranks = sorted(ranks_of.get(exc.message.split("\n", 1)[0][:200], ()))
    return list(last.values())


def parse_traceback(text: str) -> ParsedPaste:
    """Turn a paste into exceptions, warnings and versions. Never raises."""
    try:
        return _parse(text)
    except BudgetExceeded:
        raise
    except Exception:  # a paste must never break the answer; fall back to the raw text
        return ParsedPaste(text=text[-MAX_PARSE_CHARS:])


def _parse(text: str) -> ParsedPaste:
    if not isinstance(text, str):
        text = str(text)
    text = _valid_unicode(text[-MAX_PARSE_CHARS:])
    cleaned = _clean(text)
    check_budget()
    stripped, prefixes = _strip_prefixes(cleaned)
    walker = _Walker(stripped.split("\n"))
    walker.walk()
    exceptions = list(walker.exceptions)
    if not exceptions:
        exceptions = _quoted_exceptions(stripped)
    if "rank" in prefixes:
        exceptions = _collapse_ranks(exceptions, cleaned)
    python_version, torch_version = _versions(cleaned)
    return ParsedPaste(
        text=stripped,
        exceptions=exceptions[-MAX_EXCEPTIONS:],
        warnings=list(walker.warnings),
        prefixes=prefixes,
        python_version=python_version,
        torch_version=torch_version,
        trailing_frames=walker.frames,
    )
