"""What reading a paste gives: its exceptions with their frames, its warnings, and its versions.

`ParsedPaste.final` is the exception an answer explains; `app.tracebacks.parse_traceback` makes
these.
"""

import re
from dataclasses import dataclass, field

# Errors that only report that a child process failed; the child's own error is the one to explain.
LAUNCHER_WRAPPERS = frozenset(
    {"ChildFailedError", "ProcessRaisedException", "ProcessExitedException"}
)

# ---- what the result holds -------------------------------------------------------------------


@dataclass
class Frame:
    file: str
    line: int | None = None
    function: str | None = None
    code: str | None = None
    library: bool = False


@dataclass
class ParsedException:
    qualified_type: str
    message: str
    frames: list[Frame] = field(default_factory=list)
    # How it follows the exception before it: "cause" (raise ... from), "context" (during
    # handling), "worker" (the original error inside a re-raised worker error), or None.
    link: str | None = None
    origin: str = "python"  # python | cpp | crash | bare | quoted
    ranks: list[int] = field(default_factory=list)  # the ranks that printed this same error

    @property
    def type(self) -> str:
        return re.split(r"\.|::", self.qualified_type)[-1]

    @property
    def first_line(self) -> str:
        first = self.message.splitlines()[0] if self.message else ""
        return f"{self.qualified_type}: {first}" if first else self.qualified_type


@dataclass
class ParsedWarning:
    category: str
    message: str
    file: str | None = None
    line: int | None = None


@dataclass
class ParsedPaste:
    text: str  # the cleaned text, prefixes removed
    exceptions: list[ParsedException] = field(default_factory=list)
    warnings: list[ParsedWarning] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)  # kinds of line prefix that were removed
    python_version: str | None = None
    torch_version: str | None = None
    # Frames after the last exception that no exception line followed: a paste cut off before
    # its error (or one whose error line was not copied).
    trailing_frames: list[Frame] = field(default_factory=list)

    @property
    def final(self) -> ParsedException | None:
        """The exception to explain: a worker's original error wins over its re-raise, and a
        launcher's summary (torchrun's ChildFailedError) over nothing but itself."""
        for exc in reversed(self.exceptions):
            if exc.link == "worker":
                return exc
        for exc in reversed(self.exceptions):
            if exc.type not in LAUNCHER_WRAPPERS:
                return exc
        return self.exceptions[-1] if self.exceptions else None

    @property
    def user_frame(self) -> Frame | None:
        """The last frame in the user's own code of the final exception (or any exception)."""
        ordered = ([self.final] if self.final else []) + list(reversed(self.exceptions))
        for exc in ordered:
            for frame in reversed(exc.frames):
                if not frame.library:
                    return frame
        return None
