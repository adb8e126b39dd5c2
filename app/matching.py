"""Matching exception messages against every signature of every entry in one RE2 pass.

One `re2.Set` holds all message patterns; only the patterns it reports are run again, one by
one, for their span and named groups. Ranking prefers an agreeing exception type, then the more
specific pattern (more literal characters).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

import re2

from app.signatures import (
    PatternError,
    compile_pattern,
    exception_agrees,
    literal_length,
    split_exception_line,
)

_SET_OPTIONS = re2.Options()
_SET_OPTIONS.log_errors = False
_SET_OPTIONS.max_mem = 512 << 20  # the default budget fails to compile past ~1-2k patterns


@dataclass(frozen=True)
class SignatureRecord:
    """What the matcher needs of one signature, whether it comes from the database or a file."""

    entry_id: str
    position: int
    message: str
    example: str
    exception: str | None = None
    frame: str | None = None


@dataclass(frozen=True)
class SignatureHit:
    signature: SignatureRecord
    span: tuple[int, int]
    captures: dict[str, str] = field(default_factory=dict)
    type_agrees: bool = False
    specificity: int = 0

    @property
    def rank(self) -> tuple[bool, int]:
        return (self.type_agrees, self.specificity)


class SignatureMatcher:
    """All signatures compiled once; `match_message` is then one set pass plus confirmations."""

    def __init__(self, records: Iterable[SignatureRecord]) -> None:
        self._records: list[SignatureRecord] = []
        self._regexes = []
        self._specificity: list[int] = []
        self._set = re2.Set.SearchSet(_SET_OPTIONS)
        for record in records:
            try:
                regex = compile_pattern(record.message)
            except PatternError:
                continue  # reported by the checker; a broken pattern must not stop the rest
            self._set.Add(record.message)
            self._records.append(record)
            self._regexes.append(regex)
            self._specificity.append(literal_length(record.message))
        if self._records:
            try:
                self._set.Compile()
            except re2.error as exc:
                raise RuntimeError(
                    "the signature set did not compile within its memory budget"
                ) from exc

    def __len__(self) -> int:
        return len(self._records)

    def match_message(self, message: str, exception_type: str | None = None) -> list[SignatureHit]:
        """Every signature whose pattern is found in `message`, best first."""
        if not self._records:
            return []
        hits = []
        for index in self._set.Match(message) or ():
            found = self._regexes[index].search(message)
            if found is None:
                continue
            record = self._records[index]
            captures = {k: v for k, v in found.groupdict().items() if v is not None}
            hits.append(
                SignatureHit(
                    signature=record,
                    span=found.span(),
                    captures=captures,
                    type_agrees=exception_agrees(record.exception, exception_type),
                    specificity=self._specificity[index],
                )
            )
        hits.sort(key=lambda hit: hit.rank, reverse=True)
        return hits

    def match_exception_line(self, text: str) -> list[SignatureHit]:
        """Match a `Type: message` line, such as a signature's example."""
        line = split_exception_line(text)
        return self.match_message(line.message, line.type)
