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
