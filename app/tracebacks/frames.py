"""The frames of an error as a reader wants them: the user's own last frame first, with its code
line, then the frames in the order Python prints them, each run of library frames folded.

A frame is a library's when its file is under site-packages or dist-packages, in torch's own
files, in Python's standard library or a frozen module, or a compiled extension
(`is_library_path`, which the parser uses too). Folding reads frames already parsed
(`parse_traceback`), or the `parsed` part of an answer (this process's or a server's JSON), in
one pass over at most MAX_FOLDED_FRAMES of them: a paste of any size gives a bounded view. The
faces only present the result: a <details> per folded run on the /match page, one line per run
(`folded_lines`) in the CLI and the hook.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.tracebacks.results import Frame

# The frames nearest the error are kept; a deeper stack (a recursion, a hostile paste) is
# counted, not shown.
MAX_FOLDED_FRAMES = 200
MAX_CALLERS_SHOWN = 5  # the user's frames named under the last one, in text

# Alternatives of plain literals and character classes only, each anchored or fixed: linear.
_LIBRARY_PATH = re.compile(
    r"site-packages|dist-packages|[/\\]lib[/\\]python\d|[/\\]Lib[/\\]|^<frozen |"
    r"^/usr/lib/|[/\\]torch[/\\]|\.so(?:\.\d+)*$|^/opt/conda/"
)


def is_library_path(path: str) -> bool:
    """Whether a frame in `path` is a library's (not the user's own code)."""
    return bool(_LIBRARY_PATH.search(path))


@dataclass(frozen=True)
class LibraryRun:
    """Library frames that follow each other in a traceback, folded into one step."""

    frames: list[Frame]

    @property
    def count(self) -> int:
        return len(self.frames)


@dataclass(frozen=True)
class FoldedFrames:
    user_frame: Frame | None  # the user's last frame: where their code called into the error
    steps: list[Frame | LibraryRun] = field(default_factory=list)  # user frames and runs, in order
    library_count: int = 0  # library frames among the steps
    omitted: int = 0  # earlier frames past MAX_FOLDED_FRAMES, neither shown nor counted above

    @property
    def callers(self) -> list[Frame]:
        """The user's other frames, newest first: the calls that led to `user_frame`."""
        own = [s for s in self.steps if isinstance(s, Frame) and s is not self.user_frame]
        return own[::-1]


def fold_frames(frames: Sequence[Frame], user_frame: Frame | None = None) -> FoldedFrames:
    """`frames` (most recent call last) with library runs folded; `user_frame` defaults to the
    last of them that is not a library's."""
    omitted = max(0, len(frames) - MAX_FOLDED_FRAMES)
    kept = list(frames[omitted:])
    if user_frame is None:
        user_frame = next((f for f in reversed(kept) if not f.library), None)
    steps: list[Frame | LibraryRun] = []
    for frame in kept:
        if not frame.library:
            steps.append(frame)
        elif steps and isinstance(steps[-1], LibraryRun):
            steps[-1].frames.append(frame)
        else:
            steps.append(LibraryRun([frame]))
    library = sum(s.count for s in steps if isinstance(s, LibraryRun))
    return FoldedFrames(user_frame, steps, library, omitted)


def _frame_of(value: Any) -> Frame | None:
    """A frame from an answer's JSON (a server's too: anything not shaped like one is skipped)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("file"), str):
        return None
    line, function, code = value.get("line"), value.get("function"), value.get("code")
    return Frame(
        file=value["file"],
        line=line if isinstance(line, int) and not isinstance(line, bool) else None,
        function=function if isinstance(function, str) else None,
        code=code if isinstance(code, str) else None,
        library=value.get("library") is True,
    )


def folded_from_answer(parsed: Any) -> FoldedFrames:
    """The final exception's frames of an answer's `parsed` part, folded, with the answer's own
    user frame first (which may belong to another exception of the chain)."""
    if not isinstance(parsed, Mapping):
        return FoldedFrames(None)
    exceptions, final = parsed.get("exceptions"), parsed.get("final")
    raw: list = []
    if isinstance(exceptions, list) and isinstance(final, int) and 0 <= final < len(exceptions):
        chosen = exceptions[final]
        if isinstance(chosen, Mapping) and isinstance(chosen.get("frames"), list):
            raw = chosen["frames"]
    omitted = max(0, len(raw) - MAX_FOLDED_FRAMES)
    frames = [f for f in map(_frame_of, raw[omitted:]) if f is not None]
    user = _frame_of(parsed.get("user_frame"))
    if user is not None:
        # The same frame among the final's frames is that object, so it is not a caller too.
        key = (user.file, user.line, user.function)
        same = [f for f in frames if (f.file, f.line, f.function) == key]
        user = same[-1] if same else user
    folded = fold_frames(frames, user)
    return FoldedFrames(folded.user_frame, folded.steps, folded.library_count, omitted)


def where(frame: Frame) -> str:
    """`file, line N, in function` as Python prints it (a notebook cell as IPython does)."""
    place = f"Cell {frame.file}" if frame.file.startswith("In[") else frame.file
    if frame.line is not None:
        place += f", line {frame.line}"
    if frame.function:
        place += f", in {frame.function}"
    return place


def folded_lines(folded: FoldedFrames) -> list[str]:
    """The folded frames for a terminal: the user's last frame and its code line, the user's
    frames that called it, and one line for the library frames folded (none without frames)."""
    lines: list[str] = []
    if folded.user_frame is not None:
        lines.append(f"Your last frame: {where(folded.user_frame)}")
        if folded.user_frame.code:
            lines.append(f"    {folded.user_frame.code}")
        # A recursion names one caller many times over: once, with the count.
        callers: list[tuple[str, int]] = []
        for frame in folded.callers:
            place = where(frame)
            if callers and callers[-1][0] == place:
                callers[-1] = (place, callers[-1][1] + 1)
            else:
                callers.append((place, 1))
        for place, times in callers[:MAX_CALLERS_SHOWN]:
            lines.append(f"  called from {place}" + (f" ({times} times)" if times > 1 else ""))
        if len(callers) > MAX_CALLERS_SHOWN:
            lines.append(f"  … and {len(callers) - MAX_CALLERS_SHOWN} more of your frames")
    if folded.library_count:
        plural = "s" if folded.library_count != 1 else ""
        lines.append(f"… {folded.library_count} library frame{plural} folded")
    if folded.omitted:
        lines.append(f"… {folded.omitted} earlier frames not shown")
    return lines
