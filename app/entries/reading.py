"""Reading one entry from its text, its bytes or its file: the size limits, the split into
front-matter and body, and the checks in order.

Never raises on content: a file too large, not UTF-8, unreadable or invalid comes back as an
`EntryDocument` whose problems say why, with a line.
"""

from pathlib import Path

import yaml
from pydantic import ValidationError

from app.entries.checks import _check_body, _check_fields, _check_placeholders
from app.entries.document import EntryDocument, Problem
from app.entries.front_matter import FrontMatter, _describe_validation_error
from app.entries.yaml_reader import _load_front_matter, _Refused, _walk_lines
from app.rendering import render_body

# An entry is a page (the largest is 9 KB). Rendering is linear but slow in pure Python: at this
# size the worst Markdown renders in about a second, so a draft cannot hold a worker for long.
MAX_ENTRY_BYTES = 128 * 1024
MAX_FRONT_MATTER_BYTES = 64 * 1024  # real front-matter is a few KB


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


# Contexts that name a token or bracket the scanner began and could not finish: a key without
# its colon, a quote or a bracket never closed.
_UNFINISHED_CONTEXTS = (
    "while scanning a simple key",
    "while scanning a quoted scalar",
    "while parsing a flow sequence",
    "while parsing a flow mapping",
)


def _yaml_error_line(exc: yaml.MarkedYAMLError, yaml_text: str) -> int:
    """The file line of a YAML mistake (the front-matter's line 0 is the file's line 2).

    An unfinished token is noticed only where the scanner stopped, a line or more later (on the
    next key, or at the closing `---`); the mistake is on the line where the token began. A
    quote left open ends at the next value's quote, lines later, where the parser then trips:
    the mistake is where that quoted value began."""
    problem, context = exc.problem_mark, exc.context_mark
    mark = problem or context
    unfinished = (exc.context or "").startswith(_UNFINISHED_CONTEXTS)
    if unfinished and problem and context and context.line < problem.line:
        mark = context
    elif problem is not None:
        quoted = _quoted_value_ending_on(yaml_text, problem.line)
        if quoted is not None:
            mark = quoted
    return (mark.line + 2) if mark else 1


_SCANNER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's scanner: ~10x faster


def _quoted_value_ending_on(yaml_text: str, line: int) -> yaml.error.Mark | None:
    """The start of a quoted value that spans lines and ends on `line` (0-based), if any."""
    try:
        for token in yaml.scan(yaml_text, Loader=_SCANNER):
            start, end = token.start_mark.line, token.end_mark.line
            if start > line:
                break
            quoted = isinstance(token, yaml.ScalarToken) and token.style in ("'", '"')
            if quoted and start < line == end:
                return token.start_mark
    except yaml.YAMLError:
        pass  # the tokens before the error are all this needs
    return None


def _too_large(path: str) -> EntryDocument:
    doc = EntryDocument(path=path, markdown="", front=None, body="", body_line=1, rendered=None)
    doc.problems.append(
        Problem(path, 1, f"the file is over the {MAX_ENTRY_BYTES:,} bytes an entry may have")
    )
    return doc


def parse_entry(
    markdown: str, path: str, expected_id: str | None = None, html: bool = True
) -> EntryDocument:
    """Parse and check one entry; never raises on content, reports problems on the document.
    `html=False`: the body's HTML is left empty (a check stores nothing and shows no page)."""
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
        doc.problems.append(
            Problem(
                path,
                _yaml_error_line(exc, yaml_text),
                f"front-matter is not valid YAML: {exc.problem or exc}",
            )
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
    doc.rendered = render_body(doc.body, html=html)
    _check_fields(doc, expected_id)
    _check_body(doc)
    _check_placeholders(doc)
    return doc


def parse_entry_bytes(
    data: bytes, label: str, expected_id: str | None = None, html: bool = True
) -> EntryDocument:
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
    return parse_entry(text, label, expected_id=expected_id, html=html)


def read_entry_bytes(path: Path) -> bytes:
    """A file's bytes, at most one past MAX_ENTRY_BYTES: enough to refuse a huge file unread."""
    with path.open("rb") as file:
        return file.read(MAX_ENTRY_BYTES + 1)


def read_entry_file(path: Path, label: str | None = None, html: bool = True) -> EntryDocument:
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
    return parse_entry_bytes(data, label, expected_id=path.stem, html=html)
