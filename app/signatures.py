"""Signature regexes: compiled with RE2 so that no pattern can ever take more than linear time.

RE2 refuses some constructs that Python's `re` accepts (and reads `a{,3}` as literal text); those
are found first, with their position and what to write instead, before RE2 itself is asked.
"""

from dataclasses import dataclass

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # otherwise RE2 also prints every refused pattern to stderr
_OPTIONS.max_mem = 64 << 20

_GROUP_HINTS = (
    ("(?<=", "look-behind is not supported by RE2; match the preceding text itself"),
    (
        "(?<!",
        "negative look-behind is not supported by RE2; drop it or match the text itself",
    ),
    ("(?=", "look-ahead is not supported by RE2; match the following text itself"),
    (
        "(?!",
        "negative look-ahead is not supported by RE2; drop it or use a character class",
    ),
    ("(?>", "atomic groups are not supported by RE2; use a plain group (?:...)"),
    ("(?P=", "backreferences are not supported by RE2; repeat the pattern instead"),
    ("(?#", "comments are not supported by RE2; remove the (?#...) part"),
)


class PatternError(ValueError):
    """A pattern RE2 cannot use; `position` is the 0-based offset of the problem."""

    def __init__(self, pattern: str, position: int, reason: str) -> None:
        self.pattern = pattern
        self.position = position
        self.reason = reason
        super().__init__(f"invalid regex at position {position}: {reason} in {pattern!r}")


def _unsupported_construct(pattern: str) -> PatternError | None:
    """Find constructs that Python's re accepts but RE2 refuses or reads differently."""
    i, length = 0, len(pattern)
    after_atom = False
    while i < length:
        char = pattern[i]
        if char == "\\" and i + 1 < length:
            nxt = pattern[i + 1]
            if nxt.isdigit() and nxt != "0":
                return PatternError(
                    pattern,
                    i,
                    f"backreference \\{nxt} is not supported by RE2; repeat the pattern",
                )
            if nxt == "Z":
                return PatternError(pattern, i, "RE2 has no \\Z; write \\z for the end of text")
            i, after_atom = i + 2, True
            continue
        if char == "[":
            j = i + 1
            if j < length and pattern[j] == "^":
                j += 1
            if j < length and pattern[j] == "]":
                j += 1
            while j < length and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i, after_atom = j + 1, True
            continue
        if char == "(":
            for prefix, hint in _GROUP_HINTS:
                if pattern.startswith(prefix, i):
                    return PatternError(pattern, i, hint)
            if pattern.startswith("(?", i):
                j = i + 2
                while j < length and pattern[j].isalpha():
                    j += 1
                if "x" in pattern[i + 2 : j] and j < length and pattern[j] in ":)":
                    return PatternError(
                        pattern,
                        i,
                        "verbose mode (?x) is not supported by RE2; remove it",
                    )
            i, after_atom = i + 1, False
            continue
        if char in "*+?}" and after_atom and i + 1 < length and pattern[i + 1] == "+":
            return PatternError(
                pattern,
                i + 1,
                "possessive quantifiers are not supported by RE2; drop the '+'",
            )
        if char == "{" and after_atom and pattern.startswith("{,", i):
            end = pattern.find("}", i)
            if end > i + 2 and pattern[i + 2 : end].isdigit():
                upper = pattern[i + 2 : end]
                return PatternError(
                    pattern,
                    i,
                    f"RE2 reads {{,{upper}}} as literal text; write {{0,{upper}}}",
                )
        after_atom = char not in "(|"
        i += 1
    return None


def _position_of(pattern: str, fragment: str) -> int:
    if not fragment:
        return len(pattern)
    found = pattern.rfind(fragment)
    return found if found >= 0 else 0


def compile_pattern(pattern: str) -> "re2._Regexp":
    """Compile `pattern` with RE2 or raise PatternError with its position and a hint."""
    problem = _unsupported_construct(pattern)
    if problem is not None:
        raise problem
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        text = exc.args[0].decode() if isinstance(exc.args[0], bytes) else str(exc.args[0])
        reason, _, fragment = text.partition(": ")
        position = (
            len(pattern) if reason.startswith("missing )") else _position_of(pattern, fragment)
        )
        raise PatternError(
            pattern, position, f"{reason} ({fragment!r})" if fragment else reason
        ) from None


def literal_length(pattern: str) -> int:
    """How many characters of `pattern` are literal text: the specificity used in ranking."""
    count, i, length = 0, 0, len(pattern)
    while i < length:
        char = pattern[i]
        if char == "\\" and i + 1 < length:
            count += 0 if pattern[i + 1].isalnum() else 1
            i += 2
        elif char == "[":
            j = i + 1
            while j < length and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
        elif pattern.startswith("(?P<", i):
            i = pattern.find(">", i) + 1 or length
        elif pattern.startswith("(?", i):
            i += 3 if pattern.startswith("(?:", i) else 2
        elif char == "{":
            i = pattern.find("}", i) + 1 or length
        else:
            count += char not in ".*+?()|^$"
            i += 1
    return count


@dataclass(frozen=True)
class ExceptionLine:
    """An exception line split into its type and its message (`TypeError: bad` -> both parts)."""

    type: str | None
    message: str


_EXCEPTION_SUFFIXES = (
    "Error",
    "Exception",
    "Warning",
    "Exit",
    "Interrupt",
    "Failure",
    "Fault",
    "Iteration",  # StopIteration, StopAsyncIteration
)


def split_exception_line(text: str) -> ExceptionLine:
    """Split `Type: message` when the head looks like an exception class name."""
    head, sep, rest = text.partition(": ")
    name = head.strip()
    last = name.rsplit(".", 1)[-1]
    if (
        sep
        and name.replace(".", "").replace("_", "").isalnum()
        and last.endswith(_EXCEPTION_SUFFIXES)
    ):
        return ExceptionLine(type=name, message=rest)
    return ExceptionLine(type=None, message=text)


def exception_agrees(expected: str | None, actual: str | None) -> bool:
    """Signature exception names match the last dotted part of the raised type."""
    if not expected or not actual:
        return False
    return expected.rsplit(".", 1)[-1] == actual.rsplit(".", 1)[-1]
