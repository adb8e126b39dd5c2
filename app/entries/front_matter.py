"""The front-matter contract of an entry: its fields, their types, and a problem's wording.

`FrontMatter` is strict (no coercion, no unknown field); `_describe_validation_error` turns each
of pydantic's errors into a sentence that names the field, as `pitfalls check` prints it.
"""

import re
import reprlib
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict
from pydantic_core import ErrorDetails

from app.column_limits import ENTRY_KINDS

EntryKind = Literal["error", "warning", "silent", "hang", "perf", "howto"]
ID_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
TAG_PATTERN = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")
assert set(get_args(EntryKind)) == set(ENTRY_KINDS)


class SignatureSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    exception: str | None = None
    message: str
    frame: str | None = None
    # Must also occur somewhere in the paste (a code line, a frame, a log line): for messages
    # too generic to claim an error alone, such as `invalid syntax` or `SystemExit: 2`.
    context: str | None = None
    example: str


class WordingSpec(BaseModel):
    """One message as some release of PyTorch (or a library that re-raises it) prints it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str  # `Type: message`, placeholders filled with realistic values
    source: str  # `owner/repo <tag or release line> <path in that repo>`


# `pytorch/pytorch v1.13.0 aten/src/ATen/native/TensorShape.cpp`
WORDING_SOURCE_PATTERN = re.compile(r"^[\w.-]+/[\w.-]+ \S+ [^\s/][^\s]*$")


class FrontMatter(BaseModel):
    """The front-matter fields of the entry format contract."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    title: str
    summary: str
    kind: EntryKind
    tags: list[str] = []
    aliases: list[str] = []
    questions: list[str] = []
    versions: str | None = None
    signatures: list[SignatureSpec] = []
    # The wordings of this check across releases and wrappers; each must match this entry first.
    wordings: list[WordingSpec] = []
    related: list[str] = []
    sources: list[str] = []


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 80


def _short_repr(value: Any) -> str:
    """A value quoted in a problem: a 60 KB list would drown the message."""
    text = _SHORT.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe_validation_error(error: ErrorDetails, value_path: tuple) -> str:
    where = ".".join(str(part) for part in value_path)
    kind = error["type"]
    if kind == "extra_forbidden":
        parents: dict[str, type[BaseModel]] = {"signatures": SignatureSpec, "wordings": WordingSpec}
        nested = parents.get(str(value_path[0]), SignatureSpec)
        parent: type[BaseModel] = FrontMatter if len(value_path) == 1 else nested
        allowed = ", ".join(parent.model_fields)
        return f"unknown field {value_path[-1]!r} (allowed: {allowed})"
    if kind == "missing":
        return f"required field {where!r} is missing"
    if kind == "literal_error":
        return f"{where}: {error['input']!r} is not one of {', '.join(ENTRY_KINDS)}"
    if kind == "string_type":
        value = error["input"]
        hint = " (put it in quotes: unquoted YAML reads 1.10 as 1.1 and on as true)"
        return f"{where}: expected text, got {type(value).__name__} {_short_repr(value)}{hint}"
    if kind == "list_type":
        return f"{where}: expected a list such as [a, b], got {_short_repr(error['input'])}"
    return f"{where}: {error['msg']}"
