"""The checks on a parsed entry beyond its types: fields, signatures, wordings, body, placeholders.

Each appends its `Problem`s to the document, at the file line of the field or snippet concerned.
"""

import ast
import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from app.column_limits import (
    ENTRY_ID_LENGTH,
    ENTRY_VERSIONS_LENGTH,
    SIGNATURE_EXCEPTION_LENGTH,
)
from app.drafts import TEMPLATE_PLACEHOLDERS
from app.entries.document import EntryDocument, Problem
from app.entries.front_matter import ID_PATTERN, TAG_PATTERN, WORDING_SOURCE_PATTERN, FrontMatter
from app.signatures import PatternError, compile_pattern, split_exception_line

RECOMMENDED_SECTIONS = ("What you see", "Why it happens", "Fix")
KINDS_NEEDING_SIGNATURES = ("error", "warning")


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


# Front-matter values stored in columns of limited length: checked here, so that what passes
# `pitfalls check` always stores, on SQLite (which would keep it) and PostgreSQL (which refuses).
_COLUMN_LIMITS = (
    ("id", lambda _i: ("id",), ENTRY_ID_LENGTH),
    ("versions", lambda _i: ("versions",), ENTRY_VERSIONS_LENGTH),
    ("exception", lambda i: ("signatures", i, "exception"), SIGNATURE_EXCEPTION_LENGTH),
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
