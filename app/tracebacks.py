"""Finding the exceptions in a program's output.

This is the small reader `pitfalls verify` needs: the exception lines of plain CPython tracebacks,
chained ones included, with messages that continue over several lines. The full parser of
pasted tracebacks (notebooks, log prefixes, C++ frames ...) grows from here.
"""

import re
from dataclasses import dataclass

_EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt|Failure|Fault))"
    r"(?::\s?(?P<message>.*))?$"
)
# Colour codes and control characters (a dying worker can leave a NUL before "Traceback").
_NOISE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLOCK_END = re.compile(
    r"^(Traceback \(most recent call last\):|During handling of the above exception|"
    r"The above exception was the direct cause|\s+File \")"
)


@dataclass(frozen=True)
class ExceptionText:
    type: str
    message: str
    line: int  # 0-based line of the exception line in the text

    @property
    def first_line(self) -> str:
        return f"{self.type}: {self.message.splitlines()[0] if self.message else ''}"


def find_exceptions(text: str) -> list[ExceptionText]:
    """Every `Type: message` line that ends a traceback, in order, with its continuation lines."""
    lines = _NOISE.sub("", text).splitlines()
    found: list[ExceptionText] = []
    seen_traceback = False
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("Traceback (most recent call last):"):
            seen_traceback = True
        match = _EXCEPTION_LINE.match(line)
        if match and seen_traceback:
            message = [match.group("message") or ""]
            end = index + 1
            while end < len(lines) and lines[end].strip() and not _BLOCK_END.match(lines[end]):
                message.append(lines[end])
                end += 1
            found.append(ExceptionText(match.group("type"), "\n".join(message).strip(), index))
            seen_traceback = False
            index = end
            continue
        index += 1
    return found
