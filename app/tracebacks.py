"""Reading whatever people paste: tracebacks in every dialect, turned into structure.

`parse_traceback` never raises and runs in linear time (every regex here is anchored and simple).
It cleans the wrapping (Markdown fences, quotes, HTML entities, colour codes), strips per-line
prefixes (ranks, timestamps, loggers, pytest, pdb), then walks the lines for exceptions, their
frames, chains, DataLoader workers' original tracebacks, C++ errors, warnings and crash dumps.
"""

import html
import re
import textwrap
from collections import deque
from dataclasses import dataclass, field

from app.budget import BudgetExceeded, check_budget

MAX_PARSE_CHARS = 2_000_000  # beyond this only the tail is read: the error is at the end
# A longer line is cut to its first characters: they hold what a signature reads, and the
# structure regexes then cost the same on a crafted megabyte-long line as on a real one.
MAX_LINE_CHARS = 20_000
# The answer explains the last exception of a chain; a log with thousands keeps its last ones.
MAX_EXCEPTIONS = 50
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


# ---- cleaning --------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FENCE = re.compile(r"^\s*(```|~~~)[\w+-]*\s*$")
_AUTOLINK = re.compile(r"<((?:https?|file)://[^<>\s]+)>")
_MD_LINK = re.compile(
    r"\[([^\[\]\n]{1,500})\]\((?:file|https?|vscode[\w-]*)://[^()\[\]\s]{0,2000}\)"
)
_ENTITY = re.compile(r"&(?:quot|lt|gt|amp|apos|#\d{1,6}|#x[0-9a-fA-F]{1,6});")
_ESCAPED_TRACEBACK = re.compile(r"\\n(?:Traceback \(most recent|  File \"|Original Traceback)")
# A repr with escaped newlines: RuntimeError('...\n...'). Searched only when the text has
# "Error(" or "Exception(" at all: without a literal to start from, the scan of a megabyte
# holds the GIL for ~30 ms.
_ESCAPED_REPR = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\((?:\\?['\"])")
# A whole paste in single backticks (`Traceback ... Error: message`): the ticks are not the message.
_TICKED = re.compile(r"^\s*`(?!`)(?P<body>[\s\S]*[^`])`\s*$")


# What forums and chat make of the characters an error prints: curly quotes, dashes, nbsp.
_TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u00a0": " ",
        "\u202f": " ",
    }
)


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    text = text.translate(_TYPOGRAPHY)
    text = _ANSI.sub("", text)
    text = _CONTROL.sub("", text)
    if _ENTITY.search(text):
        text = html.unescape(text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    if _ESCAPED_TRACEBACK.search(text) or (
        ("Error(" in text or "Exception(" in text) and _ESCAPED_REPR.search(text)
    ):
        # A traceback embedded in a message with literal \n (a repr, a JSON log field).
        text = text.replace("\\r\\n", "\n").replace("\\n", "\n").replace("\\t", "\t")
        text = text.replace('\\"', '"').replace("\\'", "'")
    lines = [_cut(line) for line in text.split("\n") if not _FENCE.match(line)]
    text = "\n".join(lines)
    if _FLAT_HEADER.search(text):
        text = "\n".join(_unflatten(line) for line in text.split("\n"))
    if text.count("`") == 2 and (ticked := _TICKED.match(text)):
        text = ticked.group("body")
    return text


# A traceback whose line breaks were lost (copied from a page that flattened it): the header and
# every frame on one line. `_unflatten` puts each frame, its code and the final exception back on
# lines of their own.
_FLAT_HEADER = re.compile(r'Traceback \(most recent call last\):[ \t]*(?=File ")')
_FLAT_FRAME = re.compile(
    r'[ \t]*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+?)(?=\s|File "|$)[ \t]*'
)
_FLAT_EXCEPTION = re.compile(
    r"(?:^|\s)(?P<exception>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)"
    r"|StopIteration)(?=:\s|:?\s*$)"
)


def _unflatten(line: str) -> str:
    header = _FLAT_HEADER.search(line)
    if header is None:
        return line
    out = [line[: header.start()].rstrip(), "Traceback (most recent call last):"]
    frames = list(_FLAT_FRAME.finditer(line, header.end()))
    for index, frame in enumerate(frames):
        end = frames[index + 1].start() if index + 1 < len(frames) else len(line)
        out.append(f'  File "{frame["file"]}", line {frame["line"]}, in {frame["func"]}')
        rest = line[frame.end() : end].strip()
        if index + 1 == len(frames) and (raised := _FLAT_EXCEPTION.search(rest)):
            # The last code line runs into the exception: `raise StopIteration StopIteration`.
            rest, final = rest[: raised.start()].strip(), rest[raised.start("exception") :]
            out.extend([f"    {rest}"] if rest else [])
            out.append(final)
        elif rest:
            out.append(f"    {rest}")
    return "\n".join(part for part in out if part)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


def _valid_unicode(text: str) -> str:
    """Lone surrogates (from JSON `\\ud800`) become U+FFFD: UTF-8 has no bytes for them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


# ---- per-line prefixes -------------------------------------------------------------------------

_TIMESTAMP = (
    r"(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?"
    r"|\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?|[A-Z][a-z]{2} \d{1,2} \d{2}:\d{2}:\d{2})"
)
_LEVEL = r"(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL|E|W|I)"
# Each: (name, regex of the prefix). Applied in order, repeatedly, to every line.
_PREFIXES: list[tuple[str, re.Pattern[str]]] = [
    ("quote", re.compile(r"^(?:> ?)+")),
    ("rank", re.compile(r"^(?:\[(?:rank|default|Rank)\s?\d+\]:?\s?)+")),  # also stacked
    ("rank", re.compile(r"^(?:rank|Rank)\s?\d+:\s")),
    # `2024-05-01 12:00:00,123 - train - ERROR - `: every token is followed by - or |.
    (
        "logger",
        re.compile(
            rf"^{_TIMESTAMP}\s*(?:[-|]\s*)?(?:(?:[\w.<>]+|\[[^\]]{{1,80}}\])\s*[-|]\s*){{0,4}}"
        ),
    ),
    # glog, as torchrun prints: `W1121 09:18:36.015000 8099 torch/distributed/run.py:874] `
    ("logger", re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+[^\]\s]+\]\s?")),
    # `[2024-05-01 12:00:00] ERROR: ` or `12:00:00 `
    ("logger", re.compile(rf"^{_TIMESTAMP}\s*(?:\[?{_LEVEL}\]?\s*[:|-]?\s)?")),
    ("logger", re.compile(rf"^{_LEVEL}:[\w.<>-]*:")),
    ("logger", re.compile(rf"^\[?{_LEVEL}\]?\s+[-|:]\s")),
    ("pytest", re.compile(r"^E {3,7}")),
    ("pdb", re.compile(r"^\*\*\* ")),
    ("group", re.compile(r"^\s*(?:\| )+")),
    ("rich", re.compile(r"^\s*[│┃|](?= )|[│┃]\s*$")),
]
_ALWAYS_STRIPPED = ("quote", "rank", "pytest", "pdb")  # distinctive enough to strip from one line
_GROUP_RULE = re.compile(r"^\s*\+[-+]+(?:\s+\d+\s+-+|\s*\.\.\.\s*-+)?\s*$|^\s*\+-+\s*$")
_RICH_RULE = re.compile(r"^\s*[╭╰┏┗][─━ \w().,:-]*[╮╯┓┛]\s*$|^\s*[─━]{3,}.*$")


def _strip_prefixes(text: str) -> tuple[str, list[str]]:
    lines = text.split("\n")
    used: list[str] = []
    nonblank = [line for line in lines if line.strip()] or [""]
    for name, pattern in _PREFIXES:
        check_budget()
        hits = sum(1 for line in nonblank if pattern.match(line))
        # A prefix is stripped when it is common in the paste; one stray match is left alone,
        # except for quotes and ranks, which no traceback line starts with by itself.
        common = hits == len(nonblank) or hits >= max(2, len(nonblank) // 5)
        if hits == 0 or not (common or name in _ALWAYS_STRIPPED):
            continue
        used.append(name)
        lines = [pattern.sub("", line, count=1) for line in lines]
        nonblank = [line for line in lines if line.strip()] or [""]
    if any(_GROUP_RULE.match(line) for line in lines):
        lines = [line for line in lines if not _GROUP_RULE.match(line)]
        used.append("group")
    if any(_RICH_RULE.match(line) for line in lines):
        lines = [line for line in lines if not _RICH_RULE.match(line)]
        used.append("rich")
    text = textwrap.dedent("\n".join(line.rstrip() for line in lines))
    return text, list(dict.fromkeys(used))


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
# An exception quoted inside a line of prose, a numbered list or a repr, when the paste has no
# exception line of its own: `I get RuntimeError: CUDA out of memory when ...`, `1. KeyError: 'x'`,
# `RuntimeError('Error(s) in loading state_dict ...')`, `RuntimeError:Cudnn RNN ...` (no space).
# Chinese text runs straight into an error name ("提示AssertionError: …") and may use a
# full-width colon after it ("RuntimeError：…"). The name's characters are ASCII: `\w` would
# also take Chinese, and from every character before a capital the dotted prefix would run to
# the end of the line (quadratic on "中A中A…").
_CJK_BEFORE = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
_QUOTED_EXCEPTION = re.compile(
    rf"(?:^|[\s`'\"(:>*{_CJK_BEFORE}])(?P<type>(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*"
    r"(?:Error|Exception))"
    r"(?::\s+|:(?=[A-Z])|：\s*|\((?P<quote>['\"]))(?P<message>\S.*)$"
)
_QUOTED_END = re.compile(r"[`'\"]\)?[.,;:]?\s*$")
# Lines that go on with a message after a blank line: DDP's list of parameters without grad.
_AFTER_BLANK = re.compile(
    r"^(?:\t|Parameter indices which did not receive grad|Parameters which did not receive grad"
    r"|In addition, you can set the environment variable)"
)
# A debugger's or an interpreter's prompt after an error is not part of its message.
_PROMPT = re.compile(r"^\s*(?:\(Pdb\)|ipdb>|>>>|In \[\d+\]:)")
_RANK_LINE = re.compile(r"^\s*\[(?:rank|Rank)\s?(?P<rank>\d+)\]:?\s?(?P<rest>.*)$")
_TERMINATE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s+(?P<message>.*)$")
_CPP_RAISED = re.compile(r"^\s*Exception raised from .* at .*")
_FATAL = re.compile(r"^Fatal Python error: (?P<message>.+)$")
_WARNING = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+): (?P<category>[A-Za-z_][\w.]*Warning): (?P<message>.*)$"
)
_CPP_WARNING = re.compile(r"^\[W[^\]]*\] Warning: (?P<message>.*)$")
_CPP_WARNING_FUNCTION = " (function "  # the C++ function named after the message
_PY_VERSION = re.compile(r"[/\\]python(?P<v>3\.\d{1,2})[/\\](?:site|dist)-packages")
_PY_VERSION_TEXT = re.compile(r"\bPython (?P<v>3\.\d{1,2}(?:\.\d{1,2})?)\b")
_TORCH_VERSION = re.compile(
    r"\b(?:torch|PyTorch)(?: version)?(?:\s*(?:==|:|=)\s*|\s+)v?"
    r"(?P<v>\d+\.\d+(?:\.\d+)?(?:[+.\w]*)?)"
)
_LIBRARY_PATH = re.compile(
    r"site-packages|dist-packages|[/\\]lib[/\\]python\d|[/\\]Lib[/\\]|^<frozen |"
    r"^/usr/lib/|[/\\]torch[/\\]|\.so(?:\.\d+)*$|^/opt/conda/"
)


def _is_library(path: str) -> bool:
    return bool(_LIBRARY_PATH.search(path))


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
        lines = self.lines
        index = 0
        ipython_type: str | None = None
        while index < len(lines):
            if index % 64 == 0:
                check_budget()
            line = lines[index]
            stripped = line.strip()
            if not stripped or _CARET.match(line) or _SKIP_LINE.match(line):
                index += 1
                continue
            if _CAUSE.match(line):
                self.pending_link = "cause"
            elif _CONTEXT.match(line):
                self.pending_link = "context"
            elif stripped.startswith("Original Traceback (most recent call last)"):
                self.pending_link, self.in_traceback, self.frames = "worker", True, []
            elif match := _IPYTHON_HEADER.match(stripped):
                ipython_type, self.in_traceback, self.frames = match.group("type"), True, []
            elif _TRACEBACK_HEADER.match(line):
                self.in_traceback, self.frames = True, []
            elif match := _FRAME.match(line):
                self.in_traceback = True
                frame = Frame(match.group("file"), int(match.group("line")), match.group("func"))
                frame.library = _is_library(frame.file)
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
                        _is_library(file),
                    )
                )
            elif (match := _FRAME_IPYTHON.match(line)) and (ipython_type or self.in_traceback):
                file = match.group("file").strip()
                number = match.group("line") or match.group("line2")
                cell = file.startswith("In[")
                self.frames.append(
                    Frame(
                        file, int(number), match.group("func"), None, not cell and _is_library(file)
                    )
                )
            elif (match := _ARROW.match(line)) and self.frames:
                self.frames[-1].code = match.group("code").strip()
            elif match := _FATAL.match(stripped):
                message, index = self.read_message(index, match.group("message"))
                self.add_exception("Fatal Python error", message, origin="crash")
                continue
            elif match := _TERMINATE.match(stripped):
                what = ""
                end = index + 1
                if end < len(lines) and (w := _WHAT.match(lines[end])):
                    what, end = self.read_message(end, w.group("message"))
                self.add_exception(match.group("type"), what, origin="cpp")
                index = end
                continue
            elif match := _CPP_WARNING.match(stripped):
                message, _, function = match.group("message").rpartition(_CPP_WARNING_FUNCTION)
                if not message or not function.endswith(")"):
                    message = match.group("message")
                self.warnings.append(ParsedWarning("Warning", message))
            elif (match := _WARNING.match(stripped)) and not self.in_traceback:
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
            elif match := _FRAME_CPP.match(line):
                frame = Frame(match.group("file") or "<c++>", None, match.group("func"), None, True)
                # C++ frames are printed after their error: they belong to the one just read.
                if not self.frames and not self.in_traceback and self.exceptions:
                    self.exceptions[-1].frames.append(frame)
                else:
                    self.frames.append(frame)
            elif match := _EXCEPTION.match(stripped):
                kind = match.group("type") or match.group("type2")
                first = match.group("message") or match.group("message2") or ""
                message, end = self.read_message(index, first)
                origin = "python" if (self.in_traceback or self.frames) else "bare"
                self.add_exception(kind, message, origin)
                ipython_type = None
                index = end
                continue
            index += 1


def _versions(text: str) -> tuple[str | None, str | None]:
    python = _PY_VERSION.search(text) or _PY_VERSION_TEXT.search(text)
    torch = _TORCH_VERSION.search(text)
    return (python.group("v") if python else None, torch.group("v") if torch else None)


def _quoted_exceptions(text: str) -> list[ParsedException]:
    """The exception named inside a line of prose, a list or a repr, for a paste with no other:
    the last one named, as in a traceback, so the lines are read from the end."""
    lines = text.split("\n")
    for number in range(len(lines) - 1, -1, -1):
        if number % 64 == 0:
            check_budget()
        match = _QUOTED_EXCEPTION.search(lines[number])
        if match is None:
            continue
        message = match.group("message")
        if quote := match.group("quote"):  # a repr goes on to its closing quote
            parts = [message]
            for line in lines[number + 1 : number + 50]:
                if parts[-1].rstrip().endswith(quote + ")"):
                    break
                parts.append(line)
            message = "\n".join(parts)
            # ... and no further: `RuntimeError("...")` can sit in the middle of a sentence.
            if closing := re.search(rf"(?<!\\){quote}\)", message):
                message = message[: closing.start()]
                quote = None  # closed: nothing after it to strip
        if quote or message.endswith("`"):
            message = _QUOTED_END.sub("", message)
        return [ParsedException(match.group("type"), message.strip(), origin="quoted")]
    return []


def _collapse_ranks(exceptions: list[ParsedException], text: str) -> list[ParsedException]:
    """Every rank printing the same error makes one error, with the ranks that printed it."""
    ranks_of: dict[str, set[int]] = {}
    for line in text.split("\n"):
        match = _RANK_LINE.match(line)
        if match and (line_error := _EXCEPTION.match(match.group("rest").strip())):
            head = (line_error.group("message") or line_error.group("message2") or "")[:200]
            ranks_of.setdefault(head, set()).add(int(match.group("rank")))
    # Keep the last copy, in the place of the last copy: popping and re-inserting moves a key to
    # the end of the dict in constant time (a list's remove() made this quadratic).
    last: dict[tuple[str, str], ParsedException] = {}
    for index, exc in enumerate(exceptions):
        if index % 64 == 0:
            check_budget()
        key = (exc.qualified_type, exc.message)
        last.pop(key, None)
        last[key] = exc
        exc.ranks = sorted(ranks_of.get(exc.message.split("\n", 1)[0][:200], ()))
    return list(last.values())


def parse_traceback(text: str) -> ParsedPaste:
    """Turn a paste into exceptions, warnings and versions. Never raises."""
    try:
        return _parse(text)
    except BudgetExceeded:
        raise
    except Exception:  # a paste must never break the answer; fall back to the raw text
        return ParsedPaste(text=text[-MAX_PARSE_CHARS:])


def _parse(text: str) -> ParsedPaste:
    if not isinstance(text, str):
        text = str(text)
    text = _valid_unicode(text[-MAX_PARSE_CHARS:])
    cleaned = _clean(text)
    check_budget()
    stripped, prefixes = _strip_prefixes(cleaned)
    walker = _Walker(stripped.split("\n"))
    walker.walk()
    exceptions = list(walker.exceptions)
    if not exceptions:
        exceptions = _quoted_exceptions(stripped)
    if "rank" in prefixes:
        exceptions = _collapse_ranks(exceptions, cleaned)
    python_version, torch_version = _versions(cleaned)
    return ParsedPaste(
        text=stripped,
        exceptions=exceptions[-MAX_EXCEPTIONS:],
        warnings=list(walker.warnings),
        prefixes=prefixes,
        python_version=python_version,
        torch_version=torch_version,
        trailing_frames=walker.frames,
    )
