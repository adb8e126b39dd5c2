"""Reading one entry file: YAML front-matter plus a Markdown body, checked against the contract.

Every problem is reported as a `Problem` that knows its file and line (inside the front-matter
too), so `pitfalls check`, ingest and the editor all say `file:line: what is wrong`.
"""

import ast
import hashlib
import re
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails
from sqlalchemy import Column
from sqlalchemy import inspect as sa_inspect

from app.drafts import TEMPLATE_PLACEHOLDERS
from app.models import ENTRY_KINDS, Entry, Signature
from app.rendering import RenderedBody, render_body
from app.signatures import PatternError, compile_pattern, split_exception_line

if TYPE_CHECKING:
    from yaml._yaml import Mark as _CMark

EntryKind = Literal["error", "warning", "silent", "hang", "perf", "howto"]
ID_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
TAG_PATTERN = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")
RECOMMENDED_SECTIONS = ("What you see", "Why it happens", "Fix")
KINDS_NEEDING_SIGNATURES = ("error", "warning")
# An entry is a page (the largest is 9 KB). Rendering is linear but slow in pure Python: at this
# size the worst Markdown renders in about a second, so a draft cannot hold a worker for long.
MAX_ENTRY_BYTES = 128 * 1024
MAX_FRONT_MATTER_BYTES = 64 * 1024  # real front-matter is a few KB
MAX_YAML_DEPTH = 20  # nested lists and mappings, the top-level mapping counted; real entries use 3
assert set(get_args(EntryKind)) == set(ENTRY_KINDS)


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    line: int
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.path}:{self.line}: {prefix}{self.message}"


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


class _LinedValueErrors:
    """Value errors of the constructor (int() past 4300 digits, 2020-13-45) carry their line."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)  # type: ignore[misc]
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {exc}", node.start_mark
            ) from None


class _PyFrontMatterLoader(_LinedValueErrors, yaml.SafeLoader):
    pass


_FrontMatterLoader: type = _PyFrontMatterLoader
if hasattr(yaml, "CSafeLoader"):  # libyaml's parser: ~10x faster, same events

    class _CFrontMatterLoader(_LinedValueErrors, yaml.CSafeLoader):
        pass

    _FrontMatterLoader = _CFrontMatterLoader


def _mark(mark: "yaml.error.Mark | _CMark | None") -> yaml.error.Mark | None:
    """libyaml's events carry its own Mark class; it has the same name, line and column as
    PyYAML's, all that the nodes and errors built from it read (PyYAML's CLoader does the same)."""
    return cast(yaml.error.Mark | None, mark)


class _Refused(yaml.MarkedYAMLError):
    """Front-matter that is valid YAML but not allowed: anchors, aliases, deep nesting."""

    def __init__(self, problem: str, event: yaml.Event) -> None:
        super().__init__(problem=problem, problem_mark=_mark(event.start_mark))


def _compose_node(loader: Any, depth: int) -> yaml.Node:
    """PyYAML's composer, refusing anchors, aliases and deep nesting at the event they appear,
    before any value is built: an alias bomb never expands, deep nesting never recurses."""
    event = loader.get_event()
    if isinstance(event, yaml.AliasEvent):
        raise _Refused(
            f"alias *{event.anchor} is not allowed in the front-matter: write the value out",
            event,
        )
    if event.anchor is not None:
        raise _Refused(
            f"anchor &{event.anchor} is not allowed in the front-matter: write each value out",
            event,
        )
    if isinstance(event, yaml.ScalarEvent):
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        return yaml.ScalarNode(
            tag, event.value, _mark(event.start_mark), _mark(event.end_mark), style=event.style
        )
    if depth > MAX_YAML_DEPTH:
        raise _Refused(
            f"lists and mappings nest more than {MAX_YAML_DEPTH} levels deep here", event
        )
    node: yaml.CollectionNode
    if isinstance(event, yaml.SequenceStartEvent):
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.SequenceNode, None, event.implicit)
        node = yaml.SequenceNode(
            tag, [], _mark(event.start_mark), None, flow_style=event.flow_style
        )
        while not loader.check_event(yaml.SequenceEndEvent):
            node.value.append(_compose_node(loader, depth + 1))
    else:
        assert isinstance(event, yaml.MappingStartEvent), event
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.MappingNode, None, event.implicit)
        node = yaml.MappingNode(tag, [], _mark(event.start_mark), None, flow_style=event.flow_style)
        while not loader.check_event(yaml.MappingEndEvent):
            key = _compose_node(loader, depth + 1)
            node.value.append((key, _compose_node(loader, depth + 1)))
    node.end_mark = loader.get_event().end_mark
    return node


def _load_front_matter(yaml_text: str) -> tuple[yaml.Node | None, Any]:
    """The front-matter's node tree and its value; raises MarkedYAMLError with a mark."""
    loader = _FrontMatterLoader(yaml_text)
    try:
        loader.get_event()  # stream start
        if loader.check_event(yaml.StreamEndEvent):
            return None, None
        loader.get_event()  # document start
        node = _compose_node(loader, 1)
        loader.get_event()  # document end
        if not loader.check_event(yaml.StreamEndEvent):
            raise _Refused("the front-matter must be one YAML document", loader.get_event())
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def _walk_lines(node: yaml.Node, path: tuple, offset: int, lines: dict, dupes: list) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + offset
            if key in seen:
                dupes.append((line, ".".join(map(str, (*path, key)))))
            seen.add(key)
            lines[(*path, key)] = line
            _walk_lines(value_node, (*path, key), offset, lines, dupes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + offset
            _walk_lines(item, (*path, index), offset, lines, dupes)


def _split_front_matter(text: str) -> tuple[str, str, int] | None:
    """Return (yaml text, body, body's first file line) or None when there is no front-matter."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return None
    for number, line in enumerate(lines[1:], start=1):
        if line.rstrip() in ("---", "..."):
            return (
                "\n".join(lines[1:number]),
                "\n".join(lines[number + 1 :]),
                number + 2,
            )
    return None


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


def _check_signatures(doc: EntryDocument) -> None:
    assert doc.front is not None
    for index, signature in enumerate(doc.front.signatures):
        compiled = None
        for name in ("message", "frame", "context"):
            pattern = getattr(signature, name)
            if pattern is None:
                continue
            try:
                regex = compile_pattern(pattern)
            except PatternError as exc:
                doc.problems.append(
                    Problem(
                        doc.path,
                        doc.line_of("signatures", index, name),
                        f"signatures[{index}].{name}: {exc}",
                    )
                )
                continue
            if name == "message":
                compiled = regex
        if not signature.message.strip():
            doc.problems.append(
                Problem(
                    doc.path,
                    doc.line_of("signatures", index, "message"),
                    f"signatures[{index}].message is empty",
                )
            )
        elif compiled is not None and not compiled.search(
            split_exception_line(signature.example).message
        ):
            doc.problems.append(
                Problem(
                    doc.path,
                    doc.line_of("signatures", index, "example"),
                    f"signatures[{index}].example is not matched by its own message pattern "
                    "(searched in the message after 'Type: ') "
                    f"{signature.message!r}",
                )
            )
        if signature.exception is not None and not re.fullmatch(
            r"[A-Za-z_][\w.]*", signature.exception
        ):
            doc.problems.append(
                Problem(
                    doc.path,
                    doc.line_of("signatures", index, "exception"),
                    f"signatures[{index}].exception must be a class name such as RuntimeError, "
                    f"got {signature.exception!r}",
                )
            )


def _check_wordings(doc: EntryDocument) -> None:
    """The form of each wording; whether the matcher ranks its entry first is the checker's."""
    assert doc.front is not None
    seen: set[str] = set()
    for index, wording in enumerate(doc.front.wordings):
        text_line = doc.line_of("wordings", index, "text")
        if not wording.text.strip():
            doc.problems.append(Problem(doc.path, text_line, f"wordings[{index}].text is empty"))
        elif wording.text != wording.text.strip():
            doc.problems.append(
                Problem(
                    doc.path,
                    text_line,
                    f"wordings[{index}].text starts or ends with white space: quote the message "
                    "exactly as it is printed",
                )
            )
        elif wording.text in seen:
            doc.problems.append(
                Problem(doc.path, text_line, f"wordings[{index}].text is listed twice")
            )
        seen.add(wording.text)
        if not WORDING_SOURCE_PATTERN.match(wording.source):
            doc.problems.append(
                Problem(
                    doc.path,
                    doc.line_of("wordings", index, "source"),
                    f"wordings[{index}].source {wording.source!r} must read 'owner/repo <tag or "
                    "release line> <path in that repo>', such as 'pytorch/pytorch v1.13.0 "
                    "aten/src/ATen/native/TensorShape.cpp'",
                )
            )


def _column_length(column: Column[Any]) -> int:
    # SQLModel's AutoString is a TypeDecorator over String: it answers `length`, but is no String.
    length = getattr(column.type, "length", None)
    assert isinstance(length, int), f"{column} has no length"
    return length


# Front-matter values stored in columns of limited length: checked here, so that what passes
# `pitfalls check` always stores, on SQLite (which would keep it) and PostgreSQL (which refuses).
_COLUMN_LIMITS = (
    ("id", lambda _i: ("id",), _column_length(sa_inspect(Entry).columns["id"])),
    ("versions", lambda _i: ("versions",), _column_length(sa_inspect(Entry).columns["versions"])),
    (
        "exception",
        lambda i: ("signatures", i, "exception"),
        _column_length(sa_inspect(Signature).columns["exception"]),
    ),
)


def _values(front: "FrontMatter", name: str) -> list[str | None]:
    if name == "exception":
        return [s.exception for s in front.signatures]
    return [getattr(front, name)]


def _check_fields(doc: EntryDocument, expected_id: str | None) -> None:
    front = doc.front
    assert front is not None
    add = doc.problems.append
    if not ID_PATTERN.match(front.id):
        add(
            Problem(
                doc.path,
                doc.line_of("id"),
                f"id {front.id!r} must be a lowercase slug like view-non-contiguous",
            )
        )
    if expected_id is not None and front.id != expected_id:
        add(
            Problem(
                doc.path,
                doc.line_of("id"),
                f"id {front.id!r} does not equal the file name {expected_id!r}",
            )
        )
    for name, where, limit in _COLUMN_LIMITS:
        for index, value in enumerate(_values(front, name)):
            if value is not None and len(value) > limit:
                add(
                    Problem(
                        doc.path,
                        doc.line_of(*where(index)),
                        f"{name} is {len(value)} characters, over the {limit} the database holds",
                    )
                )
    for name in ("title", "summary"):
        if not getattr(front, name).strip():
            add(Problem(doc.path, doc.line_of(name), f"{name} is empty"))
    if len(front.summary) > 300:
        add(
            Problem(
                doc.path,
                doc.line_of("summary"),
                "summary is over 300 characters",
                "warning",
            )
        )
    for index, tag in enumerate(front.tags):
        if not TAG_PATTERN.match(tag):
            add(
                Problem(
                    doc.path,
                    doc.line_of("tags", index),
                    f"tag {tag!r} must be a lowercase slug",
                )
            )
    if front.versions is not None:
        try:
            SpecifierSet(front.versions)
        except InvalidSpecifier:
            add(
                Problem(
                    doc.path,
                    doc.line_of("versions"),
                    f"versions {front.versions!r} is not a PEP 440 specifier such as '>=1.0'",
                )
            )
    if front.kind in KINDS_NEEDING_SIGNATURES and not front.signatures:
        add(
            Problem(
                doc.path,
                doc.line_of("kind"),
                f"an entry of kind {front.kind!r} needs at least one signature",
            )
        )
    if front.id in front.related:
        add(Problem(doc.path, doc.line_of("related"), "related lists the entry itself"))
    _check_signatures(doc)
    _check_wordings(doc)


def _check_body(doc: EntryDocument) -> None:
    rendered = doc.rendered
    assert rendered is not None
    if not doc.body.strip():
        doc.problems.append(Problem(doc.path, doc.body_line, "the body is empty"))
        return
    for snippet in rendered.snippets:
        line = doc.body_line + snippet.line
        try:
            ast.parse(snippet.code)
        except SyntaxError as exc:
            doc.problems.append(
                Problem(
                    doc.path,
                    line + (exc.lineno or 0),
                    f"python {snippet.role} snippet does not parse: {exc.msg}",
                )
            )
        for message in snippet.option_problems:
            doc.problems.append(Problem(doc.path, line, f"python {snippet.role}: {message}"))
    missing = [name for name in RECOMMENDED_SECTIONS if name not in rendered.headings]
    if missing:
        doc.problems.append(
            Problem(
                doc.path,
                doc.body_line,
                f"missing section(s): {', '.join('## ' + m for m in missing)}",
                "warning",
            )
        )


def _check_placeholders(doc: EntryDocument) -> None:
    """The editor's template text left in the file: an unfinished entry, at each line."""
    for number, line in enumerate(doc.markdown.split("\n"), start=1):
        for placeholder in TEMPLATE_PLACEHOLDERS:
            if placeholder.casefold() in line.casefold():
                shown = placeholder if len(placeholder) <= 40 else placeholder[:37] + "…"
                doc.problems.append(
                    Problem(
                        doc.path,
                        number,
                        f"unfinished: the editor's template text {shown!r} is still here; "
                        "replace it with the entry's own words",
                    )
                )


def _too_large(path: str) -> EntryDocument:
    doc = EntryDocument(path=path, markdown="", front=None, body="", body_line=1, rendered=None)
    doc.problems.append(
        Problem(path, 1, f"the file is over the {MAX_ENTRY_BYTES:,} bytes an entry may have")
    )
    return doc


def parse_entry(markdown: str, path: str, expected_id: str | None = None) -> EntryDocument:
    """Parse and check one entry; never raises on content, reports problems on the document."""
    if len(markdown) > MAX_ENTRY_BYTES or len(markdown.encode("utf-8")) > MAX_ENTRY_BYTES:
        return _too_large(path)
    markdown = markdown.removeprefix("\ufeff").replace("\r\n", "\n")
    doc = EntryDocument(
        path=path, markdown=markdown, front=None, body="", body_line=1, rendered=None
    )
    if "\x00" in markdown:
        line = markdown[: markdown.index("\x00")].count("\n") + 1
        doc.problems.append(
            Problem(
                path, line, "the text holds a NUL character (\\0): remove it, no database stores it"
            )
        )
        return doc
    split = _split_front_matter(markdown)
    if split is None:
        doc.problems.append(
            Problem(
                path,
                1,
                "no front-matter: the file must start with '---', then the YAML fields, then '---'",
            )
        )
        return doc
    yaml_text, doc.body, doc.body_line = split
    encoded = yaml_text.encode("utf-8")
    if len(encoded) > MAX_FRONT_MATTER_BYTES:
        line = encoded[:MAX_FRONT_MATTER_BYTES].count(b"\n") + 2
        doc.problems.append(
            Problem(
                path,
                line,
                f"the front-matter is {len(encoded):,} bytes, over the "
                f"{MAX_FRONT_MATTER_BYTES:,} allowed (reached on this line)",
            )
        )
        return doc
    try:
        node, data = _load_front_matter(yaml_text)
    except _Refused as exc:
        assert exc.problem_mark is not None
        doc.problems.append(Problem(path, exc.problem_mark.line + 2, f"{exc.problem}"))
        return doc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 2) if mark else 1
        doc.problems.append(
            Problem(path, line, f"front-matter is not valid YAML: {exc.problem or exc}")
        )
        return doc
    except (yaml.YAMLError, RecursionError, MemoryError) as exc:
        # Not expected within the limits above; still a problem of this file, never a crash.
        doc.problems.append(
            Problem(path, 2, f"front-matter could not be read: {type(exc).__name__}: {exc}")
        )
        return doc
    if node is None or not isinstance(data, dict):
        doc.problems.append(
            Problem(
                path,
                2,
                "front-matter must be a mapping of fields (id: ..., title: ...)",
            )
        )
        return doc
    duplicates: list[tuple[int, str]] = []
    _walk_lines(node, (), 2, doc.lines, duplicates)
    for line, key in duplicates:
        doc.problems.append(Problem(path, line, f"field {key!r} is given twice"))
    try:
        doc.front = FrontMatter.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            doc.problems.append(
                Problem(path, doc.line_of(*loc), _describe_validation_error(error, loc))
            )
        return doc
    doc.rendered = render_body(doc.body)
    _check_fields(doc, expected_id)
    _check_body(doc)
    _check_placeholders(doc)
    return doc


def parse_entry_bytes(data: bytes, label: str, expected_id: str | None = None) -> EntryDocument:
    """Decode and parse a file's bytes; bytes that are not UTF-8 become a problem with a line."""
    if len(data) > MAX_ENTRY_BYTES:
        return _too_large(label)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        doc = EntryDocument(
            path=label, markdown="", front=None, body="", body_line=1, rendered=None
        )
        line = data[: exc.start].count(b"\n") + 1
        doc.problems.append(Problem(label, line, f"the file is not UTF-8 text ({exc.reason})"))
        return doc
    return parse_entry(text, label, expected_id=expected_id)


def read_entry_bytes(path: Path) -> bytes:
    """A file's bytes, at most one past MAX_ENTRY_BYTES: enough to refuse a huge file unread."""
    with path.open("rb") as file:
        return file.read(MAX_ENTRY_BYTES + 1)


def read_entry_file(path: Path, label: str | None = None) -> EntryDocument:
    """Read and parse `path`; an unreadable file becomes a problem, not an exception."""
    label = label or str(path)
    try:
        data = read_entry_bytes(path)
    except OSError as exc:
        doc = EntryDocument(
            path=label, markdown="", front=None, body="", body_line=1, rendered=None
        )
        doc.problems.append(Problem(label, 1, f"the file cannot be read: {exc.strerror or exc}"))
        return doc
    return parse_entry_bytes(data, label, expected_id=path.stem)
