"""Walking a cleaned paste's lines for its structure: exceptions and their frames in every
dialect (CPython, IPython old and new, rich, C++), chains (cause, context, a DataLoader
worker's original traceback), crash dumps, C++ errors and warnings.
"""

import re
from collections import deque

from app.budget import check_budget
from app.tracebacks.frames import is_library_path
from app.tracebacks.results import Frame, ParsedException, ParsedWarning

# The answer explains the last exception of a chain; a log with thousands keeps its last ones.
MAX_EXCEPTIONS = 50

# ---- structure -------------------------------------------------------------------------------

_TRACEBACK_HEADER = re.compile(
    r"^\s*(?:\+ )?(?:Original |Exception Group )?Traceback \(most recent call (?:last|first)\):?"
)
_IPYTHON_HEADER = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)\s{3,}Traceback \(most recent call last\)")
_CAUSE = re.compile(r"^\s*The above exception was the direct cause of the following exception")
_CONTEXT = re.compile(r"^\s*During handling of the above exception, another exception occurred")
_FRAME = re.compile(
    r'^\s*(?:>\s*|❱\s*)?File "(?P<file>[^"]+)", line (?P<line>\d+)(?:,? in (?P<func>.*\S))?\s*$'
)
_FRAME_IPYTHON = re.compile(
    r"^\s*(?:File |Cell )(?P<file>.+?)(?::(?P<line>\d+)|, line (?P<line2>\d+))"
    r"(?:, in (?P<func>.*\S))?\s*$"
)
_FRAME_IPYTHON_OLD = re.compile(
    r"^(?P<file>(?:<ipython-input-[\w-]+>|\S+\.py))\s+in\s+(?P<func>[\w<>.]+)\(.*\)\s*$"
)
_FRAME_RICH = re.compile(r"^\s*(?P<file>\S+\.py):(?P<line>\d+) in (?P<func>\S+)\s*$")
_FRAME_CPP = re.compile(r"^\s*frame #\d+: (?P<func>.*?)(?: \(0x[0-9a-f]+ in (?P<file>[^()]+)\))?$")
_ARROW = re.compile(r"^\s*-+>\s*(?P<line>\d+)\s+(?P<code>.*)$")
_IPY_CODE = re.compile(r"^\s*(?P<line>\d+)\s(?P<code>.*)$")
_CARET = re.compile(r"^\s*[~^]+\s*$")
_SKIP_LINE = re.compile(
    r"^\s*(?:\[Previous line repeated \d+ more times?\]|\.\.\.\s*\d+ frames? hidden.*"
    r"|\[\.\.\. skipping .*\]|\d+ frames?|[│└├┬]\s.*|[│└]\s*$)\s*$"
)
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Warning|Exit|Interrupt|"
    r"Failure|Fault|Iteration|Exhausted|Group|Timeout|Aborted|Denied|Refused|NotFound|Unavailable)"
    r"|KeyboardInterrupt|StopIteration|GeneratorExit|c10::\w+|torch::\w+|std::\w+"
    r"|(?:[a-z_]\w*\.)+error)"  # module-level errors: struct.error, socket.error, re.error
    r"(?:: ?(?P<message>.*))?$"
    # A class in a module path with any name, when a message follows:
    # torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
    r"|^(?P<type2>(?:[a-z_]\w*\.)+[A-Z]\w*): (?P<message2>.*)$"
)
# Lines that go on with a message after a blank line: DDP's list of parameters without grad.
_AFTER_BLANK = re.compile(
    r"^(?:\t|Parameter indices which did not receive grad|Parameters which did not receive grad"
    r"|In addition, you can set the environment variable)"
)
# A debugger's or an interpreter's prompt after an error is not part of its message.
_PROMPT = re.compile(r"^\s*(?:\(Pdb\)|ipdb>|>>>|In \[\d+\]:)")
_TERMINATE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s+(?P<message>.*)$")
_CPP_RAISED = re.compile(r"^\s*Exception raised from .* at .*")
_FATAL = re.compile(r"^Fatal Python error: (?P<message>.+)$")
_WARNING = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+): (?P<category>[A-Za-z_][\w.]*Warning): (?P<message>.*)$"
)
_CPP_WARNING = re.compile(r"^\[W[^\]]*\] Warning: (?P<message>.*)$")
_CPP_WARNING_FUNCTION = " (function "  # the C++ function named after the message


def _message_continues(line: str) -> bool:
    """Whether a line after an exception line still belongs to its message."""
    if not line.strip():
        return False
    return not (
        _PROMPT.match(line)
        or _TRACEBACK_HEADER.match(line)
        or _CAUSE.match(line)
        or _CONTEXT.match(line)
        or _FRAME.match(line)
        or _CPP_RAISED.match(line)
        or _FRAME_CPP.match(line)
        or _WARNING.match(line)
        or _TERMINATE.match(line)
    )


class _Walker:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        # Only the last ones are kept: a paste of 20,000 errors would otherwise keep 20,000
        # objects alive, and the garbage collector's full pass over them held the GIL for
        # ~100 ms, stalling every other request.
        self.exceptions: deque[ParsedException] = deque(maxlen=MAX_EXCEPTIONS)
        self.warnings: deque[ParsedWarning] = deque(maxlen=MAX_EXCEPTIONS)
        self.frames: list[Frame] = []
        self.pending_link: str | None = None
        self.in_traceback = False
        self.ipython_type: str | None = None  # the type an IPython traceback's header named

    def add_exception(self, qualified: str, message: str, origin: str = "python") -> None:
        link = self.pending_link
        self.exceptions.append(
            ParsedException(qualified, message.strip(), self.frames, link, origin)
        )
        self.frames, self.pending_link, self.in_traceback = [], None, False

    def read_message(self, start: int, first: str) -> tuple[str, int]:
        """The message starting on line `start` (already split off), with continuation lines."""
        parts = [first]
        index = start + 1
        while index < len(self.lines):
            if (index - start) % 64 == 0:
                check_budget()
            line = self.lines[index]
            # A blank line before a known continuation (a tab-indented list of keys, DDP's
            # parameters without grad) does not end the message.
            if (
                not line.strip()
                and index + 1 < len(self.lines)
                and _AFTER_BLANK.match(self.lines[index + 1])
            ):
                index += 1
                continue
            if not _message_continues(line) or line.strip().startswith(
                "Original Traceback (most recent call last)"
            ):
                break
            parts.append(line)
            index += 1
        return "\n".join(parts), index

    def walk(self) -> None:
        index = 0
        while index < len(self.lines):
            if index % 64 == 0:
                check_budget()
            index = self.read_line(index)

    def read_line(self, index: int) -> int:
        """Read the line at `index`, and the lines that belong to it; the next line's index.

        Each step reads one kind of line or declines (None), tried in this order: a line of
        one kind is never read as a later kind (a frame is not a warning, a warning is not
        an exception line).
        """
        line = self.lines[index]
        stripped = line.strip()
        if not stripped or _CARET.match(line) or _SKIP_LINE.match(line):
            return index + 1
        steps = (
            self.chain_or_header,
            self.python_frame,
            self.crash,
            self.warning,
            self.cpp_frame,
            self.exception_line,
        )
        for step in steps:
            after = step(index, line, stripped)
            if after is not None:
                return after
        return index + 1

    def chain_or_header(self, index: int, line: str, stripped: str) -> int | None:
        """How the next exception follows the last one, or the start of a traceback."""
        if _CAUSE.match(line):
            self.pending_link = "cause"
        elif _CONTEXT.match(line):
            self.pending_link = "context"
        elif stripped.startswith("Original Traceback (most recent call last)"):
            self.pending_link, self.in_traceback, self.frames = "worker", True, []
        elif match := _IPYTHON_HEADER.match(stripped):
            self.ipython_type, self.in_traceback, self.frames = match.group("type"), True, []
        elif _TRACEBACK_HEADER.match(line):
            self.in_traceback, self.frames = True, []
        else:
            return None
        return index + 1

    def python_frame(self, index: int, line: str, stripped: str) -> int | None:
        """A frame of a Python traceback in any dialect (CPython with its code line, rich,
        IPython old and new), or IPython's arrow at the frame's line."""
        lines = self.lines
        if match := _FRAME.match(line):
            self.in_traceback = True
            frame = Frame(match.group("file"), int(match.group("line")), match.group("func"))
            frame.library = is_library_path(frame.file)
            code = lines[index + 1].strip() if index + 1 < len(lines) else ""
            if code and not _FRAME.match(lines[index + 1]) and not _EXCEPTION.match(code):
                frame.code = code
                index += 1
            self.frames.append(frame)
        elif (match := _FRAME_RICH.match(line)) or (match := _FRAME_IPYTHON_OLD.match(line)):
            self.in_traceback = True
            file = match.group("file")
            number = match.groupdict().get("line")
            self.frames.append(
                Frame(
                    file,
                    int(number) if number else None,
                    match.group("func"),
                    None,
                    is_library_path(file),
                )
            )
        elif (match := _FRAME_IPYTHON.match(line)) and (self.ipython_type or self.in_traceback):
            file = match.group("file").strip()
            number = match.group("line") or match.group("line2")
            cell = file.startswith("In[")
            self.frames.append(
                Frame(
                    file, int(number), match.group("func"), None, not cell and is_library_path(file)
                )
            )
        elif (match := _ARROW.match(line)) and self.frames:
            self.frames[-1].code = match.group("code").strip()
        else:
            return None
        return index + 1

    def crash(self, index: int, line: str, stripped: str) -> int | None:
        """A crash dump's `Fatal Python error`, or C++'s `terminate called after throwing`
        with its `what():` message."""
        if match := _FATAL.match(stripped):
            message, end = self.read_message(index, match.group("message"))
            self.add_exception("Fatal Python error", message, origin="crash")
            return end
        if match := _TERMINATE.match(stripped):
            what = ""
            end = index + 1
            if end < len(self.lines) and (w := _WHAT.match(self.lines[end])):
                what, end = self.read_message(end, w.group("message"))
            self.add_exception(match.group("type"), what, origin="cpp")
            return end
        return None

    def warning(self, index: int, line: str, stripped: str) -> int | None:
        """A C++ `[W …] Warning:` line, or a Python warning outside a traceback."""
        lines = self.lines
        if match := _CPP_WARNING.match(stripped):
            message, _, function = match.group("message").rpartition(_CPP_WARNING_FUNCTION)
            if not message or not function.endswith(")"):
                message = match.group("message")
            self.warnings.append(ParsedWarning("Warning", message))
            return index + 1
        if (match := _WARNING.match(stripped)) and not self.in_traceback:
            # A warning hard-wrapped at its sentences goes on in unindented lines; the
            # warnings module's own source line below it is indented.
            message = match.group("message")
            while (
                index + 1 < len(lines)
                and lines[index + 1][:1].strip()
                and _message_continues(lines[index + 1])
                and not _EXCEPTION.match(lines[index + 1])
            ):
                index += 1
                message += "\n" + lines[index]
            self.warnings.append(
                ParsedWarning(
                    match.group("category").rsplit(".", 1)[-1],
                    message,
                    match.group("file"),
                    int(match.group("line")),
                )
            )
            return index + 1
        return None

    def cpp_frame(self, index: int, line: str, stripped: str) -> int | None:
        """A C++ frame (`frame #3: …`)."""
        match = _FRAME_CPP.match(line)
        if match is None:
            return None
        frame = Frame(match.group("file") or "<c++>", None, match.group("func"), None, True)
        # C++ frames are printed after their error: they belong to the one just read.
        if not self.frames and not self.in_traceback and self.exceptions:
            self.exceptions[-1].frames.append(frame)
        else:
            self.frames.append(frame)
        return index + 1

    def exception_line(self, index: int, line: str, stripped: str) -> int | None:
        """An exception's `Type: message` line, with the lines its message goes on in."""
        match = _EXCEPTION.match(stripped)
        if match is None:
            return None
        kind = match.group("type") or match.group("type2")
        first = match.group("message") or match.group("message2") or ""
        message, end = self.read_message(index, first)
        origin = "python" if (self.in_traceback or self.frames) else "bare"
        self.add_exception(kind, message, origin)
        self.ipython_type = None
        return end
