"""Which torch a paste was made with, and whether an entry's `versions:` range covers it.

A paste often shows its torch version: `collect_env`'s `PyTorch version: 2.1.0+cu121`, a
`pip list` or `pip freeze` line (`torch 2.1.0`, `torch==2.1.0`), a wheel or dist-info name
(`torch-2.1.0+cu121-cp310-…whl`), `torch.__version__` printed (`torch version: 2.1.0`). An
entry whose range excludes that version is ranked after the ones that include it, and the
answer says why. Only lines that name torch are read, each up to a bounded length, so any
paste is read in linear time; `torchvision 0.16.0` and the like are not torch.
"""

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

MAX_LINE = 400  # characters of a line read for a version
MAX_LINES = 2000  # lines that name torch, at most

_VERSION = r"(?P<v>\d{1,2}\.\d{1,3}(?:\.\d{1,3})?)(?:[.+a-z0-9]*)"
_PATTERNS = [
    re.compile(r"\bPyTorch version:\s*" + _VERSION, re.IGNORECASE),  # collect_env
    # `torch 2.1.0`, `torch==2.1.0`, `torch: 2.1.0`, `torch version 2.1`, `pytorch:1.7.1`,
    # `torch2.0.1`; not `torch>=1.3` (a requirement) nor `torchvision 0.16.0`.
    re.compile(
        r"(?<![\w.-])(?:py)?torch(?:\s+version)?\s*(?:==|:|=)?\s*v?" + _VERSION,
        re.IGNORECASE,
    ),
    re.compile(r"(?<![\w.-])torch-" + _VERSION + r"(?:-|\.dist-info|\.whl|$)"),
    re.compile(r"torch\.__version__\W{0,6}" + _VERSION),
]
# pip's "Could not find a version that satisfies the requirement torch==X" names the version
# asked for, not the one installed.
_NOT_INSTALLED = re.compile(r"satisfies the requirement", re.IGNORECASE)


def paste_torch_version(text: str) -> Version | None:
    """The torch version the paste shows, or None; the first one found wins."""
    seen = 0
    for line in text.splitlines():
        lowered = line[:MAX_LINE]
        if "torch" not in lowered.lower() or _NOT_INSTALLED.search(lowered):
            continue
        seen += 1
        if seen > MAX_LINES:
            break
        for pattern in _PATTERNS:
            found = pattern.search(lowered)
            if found:
                try:
                    return Version(found.group("v"))
                except InvalidVersion:
                    continue
    return None


def outside_range(versions: str | None, shown: Version | None) -> bool:
    """True when the entry's range is known and `shown` is outside it."""
    if not versions or shown is None:
        return False
    try:
        return not SpecifierSet(versions).contains(shown, prereleases=True)
    except InvalidSpecifier:
        return False
