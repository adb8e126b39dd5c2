"""A stable fingerprint of an error: the same error with other values has the same one.

Like an error tracker's grouping key: the exception type and the message with its variable parts
(sizes, shapes, paths, devices, numbers, addresses) replaced by placeholders, hashed. Two CUDA
out-of-memory errors that tried to allocate different amounts share a fingerprint; an OOM and a
device-side assert do not. Outcome reports ("fixed it" / "didn't help") and the inbox of
unmatched errors are keyed by it.
"""

import hashlib
import re

from app.normalization import normalize_message
from app.tracebacks import ParsedPaste

FINGERPRINT_LENGTH = 16  # hex digits: 64 bits, plenty for one team's errors
_DIGITS = re.compile(r"\d+")  # what normalization leaves inside names: layer_12.weight


def fingerprint_of(exception_type: str | None, message: str) -> str:
    name = (exception_type or "").rsplit(".", 1)[-1]  # torch.OutOfMemoryError -> OutOfMemoryError
    shape = _DIGITS.sub("<n>", normalize_message(message[:4000]))[:2000]
    key = f"{name}\n{shape}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_LENGTH]


def paste_fingerprint(parsed: ParsedPaste) -> str | None:
    """The fingerprint of the paste's final error (or its last warning); None for a paste that
    holds neither (prose, a bare log)."""
    if parsed.exceptions:
        error = parsed.exceptions[-1]
        return fingerprint_of(error.type, error.message)
    if parsed.warnings:
        warning = parsed.warnings[-1]
        return fingerprint_of(warning.category, warning.message)
    return None
