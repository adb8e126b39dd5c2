"""A parsed entry and its problems: what every reader of an entry file gets back.

A `Problem` knows its file and line (inside the front-matter too), so `pitfalls check`, ingest
and the editor all say `file:line: what is wrong`.
"""

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from app.entries.front_matter import FrontMatter
from app.rendering import RenderedBody


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    line: int
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.path}:{self.line}: {prefix}{self.message}"


@dataclass
class EntryDocument:
    """A parsed entry file. `front` is None when the front-matter could not be read at all."""

    path: str
    markdown: str
    front: FrontMatter | None
    body: str
    body_line: int  # file line (1-based) of the body's first line
    rendered: RenderedBody | None
    lines: dict[tuple, int] = field(default_factory=dict)  # front-matter path -> file line
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.front is not None and not any(p.severity == "error" for p in self.problems)

    @property
    def content_hash(self) -> str:
        return content_hash(self.markdown)

    def line_of(self, *path: Any) -> int:
        """The file line of a front-matter field, falling back to its nearest parent."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return 1


def content_hash(markdown: str) -> str:
    return hashlib.sha256(markdown.encode("utf-8")).hexdigest()
