"""Redaction's second reader: Yelp's detect-secrets plugins, a maintained rule set.

The plugins run as a library on each line: `analyze_line` of every plugin class, with its own
heuristic filters, and no verification (that would send the value over the network; it is off
in the library's default settings). Their regexes are Python `re` and some backtrack
(IbmCloudIamDetector takes 40 s on a line of 2,000 spaces; KeywordDetector is quadratic in a
word's length), so they read windows of at most LIBRARY_WINDOW characters with spaces collapsed,
and only the first LIBRARY_SCAN_CHARS of a text: a bounded cost beside the linear RE2 rules.
"""

from collections.abc import Iterator
from functools import cache

import re2

LIBRARY_SCAN_CHARS = 16_384  # the library's share: every kept message is shorter than this
LIBRARY_WINDOW = 256  # the library's backtracking grows with a window's length, not the text's

_SPACES = re2.compile(r"[ \t\f\v\r]+")
_WIDEN_CHARS = 128  # bounded, so a value repeated many times costs linear time
_EXTEND = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.+")
_QUOTES_REQUIRED = frozenset({"KeywordDetector", "Base64HighEntropyString", "HexHighEntropyString"})


@cache
def load_plugins() -> list[object]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    return [plugin() for plugin in classes]


def _library_windows(text: str) -> Iterator[str]:
    """Pieces of at most LIBRARY_WINDOW characters, cut at spaces, spaces collapsed."""
    for line in text[:LIBRARY_SCAN_CHARS].split("\n"):
        line = _SPACES.sub(" ", line).strip()
        while line:
            if len(line) <= LIBRARY_WINDOW:
                yield line
                break
            cut = line.rfind(" ", 0, LIBRARY_WINDOW)
            cut = cut if cut > 0 else LIBRARY_WINDOW
            yield line[:cut]
            line = line[cut:].lstrip()


def library_findings(text: str) -> set[str]:
    """The secret values detect-secrets' plugins find in the text (its own heuristic filters
    applied: templated, sequential and letterless values are not secrets)."""
    from detect_secrets.filters.heuristic import (
        is_not_alphanumeric_string,
        is_sequential_string,
        is_templated_secret,
    )

    found: set[str] = set()
    for window in _library_windows(text):
        quoted = "'" in window or '"' in window
        for plugin in load_plugins():
            if not quoted and type(plugin).__name__ in _QUOTES_REQUIRED:
                continue  # they find only quoted values, and backtrack most on long words
            for secret in plugin.analyze_line(filename="paste", line=window):  # type: ignore[attr-defined]
                value = secret.secret_value or ""
                if len(value) < 3 or "<" in value:
                    continue
                if is_templated_secret(value) or is_sequential_string(value):
                    continue
                if not is_not_alphanumeric_string(value):
                    found.add(value)
    return found


def redact_library_findings(text: str) -> str:
    found = sorted(library_findings(text), key=len, reverse=True)
    if not found:
        return text
    # One pass for all the values (the longest first), wherever they occur in the text.
    pattern = re2.compile(
        "|".join("[ \t]+".join(re2.escape(part) for part in value.split()) for value in found)
    )
    spans = [_widen(text, start=m.start(), end=m.end()) for m in pattern.finditer(text)]
    out, at = [], 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        if start >= at:  # else it overlaps the last one, already hidden up to `at`
            out.append(text[at:start])
            out.append("<secret>")
        at = end
    out.append(text[at:])
    return "".join(out)


def _widen(text: str, *, start: int, end: int) -> tuple[int, int]:
    """Some plugins report only part of a token (`ghp` of `ghp_…`): the token goes whole."""
    floor, ceiling = max(0, start - _WIDEN_CHARS), min(len(text), end + _WIDEN_CHARS)
    while start > floor and text[start - 1] in _EXTEND and text[start - 1] not in "-.+":
        start -= 1
    while end < ceiling and (text[end] in _EXTEND or text[end] == "="):
        end += 1
    return start, end
