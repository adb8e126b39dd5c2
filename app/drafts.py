"""Drafting a new entry from an error that no entry knows yet.

`draft_markdown` turns an exception type and message into a complete entry file that a person
finishes in the browser editor: its one signature already matches the error and its variants
(other numbers, shapes, sizes, devices, names, paths), and everything else is left for the writer.

The signature is built from the first non-empty line of the message: literal text is escaped
only where RE2 needs it (so the pattern stays readable), and each variable part becomes a named
group with a general sub-pattern. A line longer than `MAX_SOURCE_CHARS` is cut at a word
boundary; the pattern is a search, so it stays open at both ends. An empty (or blank) message
becomes `EMPTY_MESSAGE_PATTERN`, which matches only an empty message: a bare `RuntimeError`.
"""

import math
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from itertools import count

import yaml

from app.signatures import split_exception_line

MAX_SOURCE_CHARS = 160
EMPTY_MESSAGE_PATTERN = r"\A\s*\z"
MAX_TITLE_CHARS = 90
MAX_ID_WORDS = 7
MAX_ID_CHARS = 60
FALLBACK_ID = "new-pitfall"
FALLBACK_TITLE = "New pitfall"


@dataclass(frozen=True)
class DraftSignature:
    """One signature in the entry format: the fields `signatures:` lists in the front-matter."""

    exception: str | None
    message: str  # an RE2 pattern, searched in the exception message
    example: str  # the error as given, as a `Type: message` line


@dataclass(frozen=True)
class _Rule:
    """A kind of variable part: how to find it in a message, and what to match in its place."""

    kind: str  # the base name of its group
    find: re.Pattern[str]  # the value is the group `v`; the rest of the match stays literal
    general: str  # RE2 sub-pattern matching this value and the others like it


def _rule(kind: str, value: str, general: str, before: str = "", after: str = "") -> _Rule:
    # ASCII: RE2's \d, \w and \b are ASCII, so a value found here always fits `general`.
    return _Rule(kind, re.compile(f"{before}(?P<v>{value}){after}", re.ASCII), general)


_PATH_HEAD = r"(?:file://)?(?:[A-Za-z]:\\|\\\\|~?/|\.\.?/)"
_PATH_TAIL = r"""[^\s'"():,]"""
_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"

# Order matters: the most specific kinds first, bare numbers last (as in app.normalization).
_RULES: tuple[_Rule, ...] = (
    _rule("path", _PATH_HEAD + _PATH_TAIL + "+", _PATH_HEAD + _PATH_TAIL + "*", r"(?<![\w.])"),
    _rule("addr", r"0x[0-9a-fA-F]+", r"0x[0-9a-fA-F]+", r"\b", r"\b"),
    _rule("shape", r"torch\.Size\(\[[^\]]*\]\)", r"torch\.Size\(\[[^\]]*\]\)"),
    _rule("shape", r"\[ *-?\d+(?: *, *-?\d+)+ *\]", r"\[[-\d, ]*\]"),
    _rule("shape", r"\( *-?\d+(?: *, *-?\d+)+ *,? *\)", r"\([-\d, ]*\)"),
    _rule("shape", r"\d+(?:x\d+)+", r"\d+(?:x\d+)+", r"\b", r"\b"),
    _rule(
        "dtype",
        r"torch\.(?:cuda\.)?(?:[A-Z][a-z]+Tensor|u?int\d+|float\d+|bfloat16|half|double|long"
        r"|bool|complex\d+)",
        r"torch\.(?:cuda\.)?[A-Za-z]\w*",
        r"\b",
        r"\b",
    ),
    _rule(
        "device",
        r"(?:cuda|mps|xpu|npu|hpu):\d+|cpu",
        r"(?:cpu|cuda|mps|xpu|npu|hpu|meta)(?::\d+)?",
        r"\b",
        r"\b",
    ),
    _rule(
        "size",
        r"\d+(?:\.\d+)? ?(?:[KMGTP]i?B|bytes)",
        r"\d+(?:\.\d+)? ?(?:[KMGTP]i?B|bytes)",
        r"\b",
        r"\b",
    ),
    *(
        _rule("name", r"""[^\s'"`]+""", f"[^{quote}\\n]*", rf"(?<!\w){quote}", rf"{quote}(?!\w)")
        for quote in "'\"`"
    ),
    _rule("n", _NUMBER, _NUMBER, r"(?<![\w.])", r"(?!\w)(?!\.\d)"),
)
_RE2_META = re.compile(r"[\\.^$|?*+()\[\]{}]")


@dataclass(frozen=True)
class _Part:
    """A piece of a message line: literal text (rule None) or a variable value."""

    text: str
    rule: _Rule | None = None


def _split_off_type(exception: str | None, message: str) -> tuple[str | None, str]:
    """Without a type, a message that starts with one (`ValueError: x`) is split like a line.
    NUL characters are dropped: no entry may hold one (a pasted binary log can)."""
    exception = (exception or "").replace("\x00", "").strip() or None
    message = message.replace("\x00", "")
    if exception is None:
        line = split_exception_line(message)
        return line.type, line.message
    return exception, message


def _first_line(message: str) -> str:
    return next((text for line in message.splitlines() if (text := line.strip())), "")


def _apply(rule: _Rule, parts: list[_Part]) -> list[_Part]:
    """Split the literal parts further wherever `rule` finds a value."""
    result: list[_Part] = []
    for part in parts:
        if part.rule is not None:
            result.append(part)
            continue
        position = 0
        for found in rule.find.finditer(part.text):
            start, end = found.span("v")
            result += [_Part(part.text[position:start]), _Part(found["v"], rule)]
            position = end
        result.append(_Part(part.text[position:]))
    return [part for part in result if part.text]


def _parts(line: str) -> list[_Part]:
    parts = [_Part(line)] if line else []
    for rule in _RULES:
        parts = _apply(rule, parts)
    return parts


def _truncate(parts: list[_Part]) -> list[_Part]:
    """The leading parts within MAX_SOURCE_CHARS, literal text cut after a whole word."""
    kept: list[_Part] = []
    room = MAX_SOURCE_CHARS
    for part in parts:
        if len(part.text) <= room:
            kept.append(part)
            room -= len(part.text)
            continue
        cut = part.text.rfind(" ", 0, room + 1) if part.rule is None else -1
        if cut > 0 and (head := part.text[:cut].rstrip()):
            kept.append(_Part(head))
        break
    if not kept and parts:  # one long word or value: a value stays whole, a word is cut
        first = parts[0]
        kept = [first if first.rule else _Part(first.text[:MAX_SOURCE_CHARS])]
    return kept


def _escape(text: str) -> str:
    """Escape only what RE2 reads as syntax; spaces, quotes, `-`, `:` and the rest stay as is."""
    return _RE2_META.sub(r"\\\g<0>", text)


def _pattern(parts: list[_Part]) -> str:
    seen: Counter[str] = Counter()
    pieces = []
    for part in parts:
        if part.rule is None:
            pieces.append(_escape(part.text))
            continue
        kind = part.rule.kind
        seen[kind] += 1
        name = kind if seen[kind] == 1 else f"{kind}{seen[kind]}"
        pieces.append(f"(?P<{name}>{part.rule.general})")
    return "".join(pieces) or EMPTY_MESSAGE_PATTERN


def draft_signature(exception: str | None, message: str) -> DraftSignature:
    """A signature for this error: its first line as a pattern with its values generalized."""
    exception, message = _split_off_type(exception, message)
    line = _first_line(message)
    if not line:
        message = ""  # a blank message is an empty one; the example keeps its `Type: `
    example = f"{exception}: {message}" if exception else message
    return DraftSignature(exception, _pattern(_truncate(_parts(line))), example)


# ---- id and title ------------------------------------------------------------------------------

_STOP_WORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "in",
        "is",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
    )
)
_CLAUSE_END = re.compile(r"[.:;!?,](?:\s|$)")
_BRACKETED = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _trim_words(words: list[str]) -> list[str]:
    words = words[:MAX_ID_WORDS]
    while words and len("-".join(words)) > MAX_ID_CHARS:
        words.pop()
    core = words
    while core and core[0] in _STOP_WORDS:
        core = core[1:]
    while core and core[-1] in _STOP_WORDS:
        core = core[:-1]
    return core or words


def _clause_words(text: str) -> list[str]:
    """Words of the first clauses: enough of the opening sentence to name the error."""
    words: list[str] = []
    for clause in _CLAUSE_END.split(text.lower()):
        words += [word for word in _WORD.findall(clause) if not word.isdigit()]
        if len(words) >= 3:
            break
    return _trim_words(words)


def _message_slug(line: str) -> str:
    """Values dropped, then bracketed asides such as `(s)` or `[Errno 2]` if words remain."""
    text = "".join(" " if part.rule else part.text for part in _parts(line))
    words = _clause_words(_BRACKETED.sub(" ", text)) or _clause_words(text)
    return "-".join(words)


def _type_slug(exception: str | None) -> str:
    last = (exception or "").rsplit(".", 1)[-1]
    return "-".join(word.lower() for word in _CAMEL_WORD.findall(last))


def draft_id(exception: str | None, message: str, taken: Collection[str] = ()) -> str:
    """A slug from the telling words of the message, made unique against `taken`."""
    exception, message = _split_off_type(exception, message)
    base = _message_slug(_first_line(message)) or _type_slug(exception) or FALLBACK_ID
    if base not in taken:
        return base
    return next(f"{base}-{n}" for n in count(2) if f"{base}-{n}" not in taken)


def _title(exception: str | None, message: str) -> str:
    words = " ".join(_first_line(message).split())
    title = ": ".join(text for text in (exception, words) if text) or FALLBACK_TITLE
    if len(title) <= MAX_TITLE_CHARS:
        return title
    cut = title.rfind(" ", 0, MAX_TITLE_CHARS)
    return title[: cut if cut > 0 else MAX_TITLE_CHARS - 1].rstrip() + "…"


# ---- the entry file ----------------------------------------------------------------------------

_BODY_HINTS = (
    ("What you see", "Add the line of code that raises it, and how it shows up (when, where)."),
    ("Why it happens", "Explain the cause: what PyTorch expects and what the code did instead."),
    ("Fix", "Show the fix, ideally as a runnable `python fix` block, and when it applies."),
)
BLANK_MESSAGE = "describe the error message here"  # the message of the editor's empty entry
# Every text the editor's templates hold for the writer to replace: an entry that still has one
# is unfinished (`app.entries` refuses it), so a hint can never be served as a fix.
TEMPLATE_PLACEHOLDERS = (*(hint for _, hint in _BODY_HINTS), BLANK_MESSAGE)


def _yaml_scalar(value: str, style: str | None = "'") -> str:
    """One YAML scalar on one line: single-quoted (or plain) when printable, else escaped."""
    if not value.isprintable():
        style = '"'  # double quotes escape tabs, line breaks and control characters
    dumped = yaml.safe_dump(value, default_style=style, allow_unicode=True, width=math.inf)
    return dumped.removesuffix("\n...\n").removesuffix("\n")


def _signature_lines(signature: DraftSignature) -> list[str]:
    fields = [
        ("exception", signature.exception and _yaml_scalar(signature.exception, None)),
        ("message", _yaml_scalar(signature.message)),
        ("example", _yaml_scalar(signature.example)),
    ]
    lines = [f"{key}: {value}" for key, value in fields if value]
    return ["  - " + lines[0], *("    " + line for line in lines[1:])]


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in `text`."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _body(example: str) -> list[str]:
    fence = _fence(example)
    lines = []
    for heading, hint in _BODY_HINTS:
        lines += [f"## {heading}", ""]
        if heading == "What you see":
            lines += [fence, example, fence, ""]
        lines += [f"*{hint}*", ""]
    return lines


def draft_markdown(exception: str | None, message: str, taken: Collection[str] = ()) -> str:
    """A complete entry file; only its summary is left empty, for the writer to fill in."""
    signature = draft_signature(exception, message)
    entry_id = draft_id(exception, message, taken)
    kind = "warning" if (signature.exception or "").endswith("Warning") else "error"
    lines = [
        "---",
        f"id: {_yaml_scalar(entry_id, None)}",
        f"title: {_yaml_scalar(_title(*_split_off_type(exception, message)))}",
        "summary: ''",
        f"kind: {kind}",
        "tags: []",
        "signatures:",
        *_signature_lines(signature),
        "---",
        "",
        *_body(signature.example),
    ]
    return "\n".join(lines)
