"""The search glossary: groups of words that mean the same to someone looking for help.

Expansion happens when an entry is indexed, not when a query is read: an entry whose text holds
any member of a group gets every member of that group in its `glossary` field. A reader who types
"显存" then finds the entries that say "GPU memory", one who types "uneven" finds "imbalanced",
in either direction, with no change to how queries are read (a CJK query is bigrams, which a
query-side rewrite could not see whole).
"""

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

GLOSSARY_FILE = Path(__file__).with_name("glossary.txt")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


@dataclass(frozen=True)
class Member:
    needle: str  # its first word, lowered: found with `str.find`, which is fast
    pattern: re.Pattern[str]  # the whole member, tried only where the needle is
    latin: bool  # must start a word

    def found_in(self, lowered: str) -> bool:
        at = lowered.find(self.needle)
        while at >= 0:
            before = lowered[at - 1 : at]
            if (not self.latin or not (before.isascii() and before.isalnum())) and (
                self.pattern.match(lowered, at)
            ):
                return True
            at = lowered.find(self.needle, at + 1)
        return False


@dataclass(frozen=True)
class Group:
    members: tuple[str, ...]
    # Each member as it may appear in an entry's text. Not one pattern with a look-behind per
    # alternative: such a pattern scans the text a character at a time, and that was most of
    # the time a 10,000-entry reindex took.
    found: tuple[Member, ...]

    def in_text(self, lowered: str) -> bool:
        return any(member.found_in(lowered) for member in self.found)


def read_glossary(text: str) -> list[Group]:
    """Groups from the file's lines: members separated by "|"; "#" starts a comment line."""
    groups = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        members = tuple(m.strip() for m in line.split("|") if m.strip())
        if len(members) < 2:
            continue
        found = []
        for member in sorted(members, key=len, reverse=True):
            lowered = member.lower()
            # Words may be joined by spaces, "_" or "-"; Latin members start a word (so "hang"
            # covers "hangs"), CJK ones match anywhere.
            pattern = re.compile(re.escape(lowered).replace(r"\ ", r"[\s_-]+"))
            found.append(Member(lowered.split()[0], pattern, not _CJK.search(member)))
        groups.append(Group(members, tuple(found)))
    return groups


@cache
def glossary() -> tuple[Group, ...]:
    return tuple(read_glossary(GLOSSARY_FILE.read_text(encoding="utf-8")))


def expansions(text: str, groups: tuple[Group, ...] | None = None) -> str:
    """Every member of every group that `text` mentions, one group a line."""
    lowered = text.lower()
    found = [g for g in (glossary() if groups is None else groups) if g.in_text(lowered)]
    return "\n".join(" ; ".join(g.members) for g in found)
