"""Normalizing an error message: the variable parts become placeholders.

Used to show a message compactly, to group similar errors, and as the text of the fallback
search when no signature matches (numbers and paths would only add noise there).
"""

import re

# Order matters: the most specific shapes first, bare numbers last.
_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?:file://)?(?:[A-Za-z]:\\|\\\\|~?/)[^\s'\"():,]*"), "<path>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),
    (re.compile(r"torch\.Size\(\[[^\]]*\]\)"), "<shape>"),
    (re.compile(r"\[\s*-?\d+(?:\s*,\s*-?\d+)+\s*\]"), "<shape>"),
    (re.compile(r"\(\s*-?\d+(?:\s*,\s*-?\d+)+\s*,?\s*\)"), "<shape>"),
    (re.compile(r"\b\d+(?:x\d+)+\b"), "<shape>"),
    (
        re.compile(
            r"\btorch\.(?:cuda\.)?(?:[A-Z][a-z]+Tensor|u?int\d+|float\d+|bfloat16|half|double|long|bool|complex\d+)\b"
        ),
        "<dtype>",
    ),
    (re.compile(r"\b(?:cuda|mps|xpu|npu):\d+\b"), "<device>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:[KMGT]i?B|bytes)\b"), "<size>"),
    (re.compile(r"\brank\s?\d+\b", re.IGNORECASE), "rank <n>"),
    (re.compile(r"\bpid(?:\(s\))?\s+\d+(?:,\s*\d+)*"), "pid <n>"),
    (re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?!\w)(?!\.\d)"), "<n>"),
]
_SPACES = re.compile(r"\s+")


def normalize_message(message: str) -> str:
    """`Expected size 4 but got size 1 for tensor number 1` -> `Expected size <n> but got ...`."""
    text = message
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text).strip()
