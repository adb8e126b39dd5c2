"""Putting an answer together from what the matcher found and what the entries say.

`assemble_answer` is shared by `answers.answer_paste` (entries read from the database) and the
CLI's cache (`local_cache`, entries read from the data dir): the same paste gets the same answer
from either. Nothing here reads a database itself; `EntryReads` is how it asks. The answer is
built of the pydantic models of app.answer_shapes, or (`assemble_plain_answer`, for the CLI's
short commands, which skip importing pydantic) of their plain twins in app.plain_answers.
"""

import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from app.fingerprints import paste_fingerprint
from app.matching.paste_matcher import PasteMatches
from app.normalization import normalize_message
from app.plain_answers import entry_url
from app.torch_versions import outside_range, paste_torch_version
from app.tracebacks import ParsedPaste

if TYPE_CHECKING:
    from app.answer_shapes import Answer, OutcomeStats, ParsedOut
    from app.answer_tokens import AnswerSigner  # imports the database's libraries

MAX_MATCHES = 5
MAX_RELATED = 5
NO_MATCH_MESSAGE = "No known pitfall matches this error."
NO_ERROR_MESSAGE = "No error message was found in the pasted text."
FOREIGN_MESSAGE = (
    "No known pitfall matches this error, and it does not look like a PyTorch error: "
    "it comes from {library}."
)
# Libraries whose own errors people paste next to PyTorch's: the top-level package of the
# exception's type or of the frame that raised it.
_FOREIGN = {
    "pandas": "pandas",
    "numpy": "NumPy",
    "cv2": "OpenCV",
    "pip": "pip",
    "_pip": "pip",
    "sklearn": "scikit-learn",
    "PIL": "Pillow",
    "matplotlib": "Matplotlib",
    "scipy": "SciPy",
    "tensorflow": "TensorFlow",
    "keras": "Keras",
    "jax": "JAX",
    "requests": "requests",
    "urllib3": "urllib3",
    "yaml": "PyYAML",
    "h5py": "h5py",
    "setuptools": "setuptools",
}
_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<package>[A-Za-z_][\w]*)")


class EntryParts(NamedTuple):
    fix_markdown: str
    fix_html: str
    snippets: tuple[Any, ...]  # answer_shapes.SnippetOut, or plain_answers.SnippetOut


class EntryReads(Protocol):
    """What an answer reads of the entries it names. An entry is anything with `id`, `title`,
    `summary`, `kind`, `versions` and `archived` (a stored entry, or `EntryFacts`)."""

    def entries(self, entry_ids: Sequence[str]) -> Mapping[str, Any]: ...

    def parts(self, entry: Any) -> EntryParts: ...

    def outcomes(self, entry_id: str, fingerprint: str | None) -> "OutcomeStats": ...


class EntryFacts(NamedTuple):
    """An entry's fields that an answer shows, without its table."""

    id: str
    title: str
    summary: str
    kind: str
    versions: str | None
    archived: bool


def _pydantic_shapes() -> ModuleType:
    from app import answer_shapes

    return answer_shapes


def parsed_out(parsed: ParsedPaste, shapes: ModuleType | None = None) -> "ParsedOut":
    """The paste as read, for the answer (`shapes`: the module of the classes to build)."""
    shapes = shapes or _pydantic_shapes()

    def frame(f) -> Any:
        return shapes.FrameOut(
            file=f.file, line=f.line, function=f.function, code=f.code, library=f.library
        )

    final = parsed.final
    user = parsed.user_frame
    return shapes.ParsedOut(
        exceptions=[
            shapes.ExceptionOut(
                type=e.type,
                qualified_type=e.qualified_type,
                message=e.message,
                link=e.link,
                origin=e.origin,
                frames=[frame(f) for f in e.frames],
                ranks=e.ranks,
            )
            for e in parsed.exceptions
        ],
        warnings=[
            shapes.WarningOut(category=w.category, message=w.message, file=w.file, line=w.line)
            for w in parsed.warnings
        ],
        final=parsed.exceptions.index(final) if final else None,
        user_frame=frame(user) if user else None,
        python_version=parsed.python_version,
        torch_version=parsed.torch_version,
        normalized_message=normalize_message(final.message) if final else "",
        prefixes=parsed.prefixes,
    )


def foreign_library(parsed: ParsedPaste) -> str | None:
    """The library the final error comes from, when it is one that is not PyTorch."""
    final = parsed.final
    if final is None:
        return None
    head = re.split(r"\.|::", final.qualified_type)[0]
    if head in _FOREIGN and "." in final.qualified_type:
        return _FOREIGN[head]
    for frame in reversed(final.frames):
        found = _PACKAGE.search(frame.file)
        if found:
            return _FOREIGN.get(found.group("package"))
    return None


def _by_torch_version(matches: list[Any], entries: Mapping[str, Any], shown) -> list[Any]:
    """Matches whose entry's range excludes the paste's torch version go after the others
    (in their order), each saying why."""
    if shown is None:
        return matches
    inside, outside = [], []
    for match in matches:
        versions = entries[match.id].versions
        if outside_range(versions, shown):
            match.version_note = (
                f"This entry is about torch {versions}; the paste shows torch {shown}."
            )
            outside.append(match)
        else:
            inside.append(match)
    return inside + outside


def _entry_match(
    shapes: ModuleType, reads: "EntryReads", entry, match, fingerprint: str | None = None
) -> Any:
    parts = reads.parts(entry)
    found = match.signature
    why = None
    if found is not None:
        hit = found.hit
        why = shapes.WhyOut(
            signature=hit.signature.message,
            example=hit.signature.example,
            exception=hit.signature.exception,
            matched_in=found.matched_in,
            subject=found.subject,
            span=hit.span,
            matched_text=found.matched_text,
        )
    return shapes.MatchOut(
        id=entry.id,
        title=entry.title,
        summary=entry.summary,
        kind=entry.kind,
        url=entry_url(entry.id),
        tier=match.tier,
        confidence=match.confidence,
        why=why,
        likely_words=list(match.words),
        captures=found.hit.captures if found is not None else {},
        fix_markdown=parts.fix_markdown,
        fix_html=parts.fix_html,
        snippets=list(parts.snippets),
        outcomes=reads.outcomes(entry.id, fingerprint) if fingerprint else shapes.OutcomeStats(),
        outcomes_all=reads.outcomes(entry.id, None),
    )


def assemble_answer(
    text: str,
    parsed: ParsedPaste,
    result: PasteMatches,
    reads: EntryReads,
    signer: "AnswerSigner | None" = None,
) -> "Answer":
    """The answer to `text` (read as `parsed`) that the matcher found `result` for."""
    return _assemble(_pydantic_shapes(), text, parsed, result, reads, signer)


def assemble_plain_answer(
    text: str, parsed: ParsedPaste, result: PasteMatches, reads: EntryReads
) -> dict[str, Any]:
    """`assemble_answer(...).model_dump()`, built without pydantic (`reads` answers with the
    classes of app.plain_answers)."""
    from app import plain_answers

    return _assemble(plain_answers, text, parsed, result, reads, None).model_dump()


def _assemble(
    shapes: ModuleType,
    text: str,
    parsed: ParsedPaste,
    result: PasteMatches,
    reads: EntryReads,
    signer: "AnswerSigner | None",
) -> Any:
    found = result.matches[:MAX_MATCHES]
    fingerprint = paste_fingerprint(parsed)
    related_ids = [c.entry_id for c in result.related[:MAX_RELATED]]
    matches: list[Any] = []
    related: list[Any] = []
    entries = reads.entries([m.entry_id for m in found] + related_ids)
    for match in found:
        entry = entries.get(match.entry_id)
        if entry is not None and not entry.archived:
            matches.append(_entry_match(shapes, reads, entry, match, fingerprint))
    matches = _by_torch_version(matches, entries, paste_torch_version(text))
    if not matches:
        for candidate in result.related[:MAX_RELATED]:
            entry = entries.get(candidate.entry_id)
            if entry is not None and not entry.archived:
                related.append(
                    shapes.RelatedOut(
                        id=entry.id,
                        title=entry.title,
                        summary=entry.summary,
                        url=entry_url(entry.id),
                        score=round(candidate.features["coverage"], 3),
                    )
                )
    foreign = None
    if matches:
        label = "Known pitfall" if matches[0].tier == "signature" else "Likely"
        message = f"{label}: {matches[0].title}"
    elif parsed.exceptions or parsed.warnings:
        foreign = foreign_library(parsed)
        message = FOREIGN_MESSAGE.format(library=foreign) if foreign else NO_MATCH_MESSAGE
    else:
        message = NO_ERROR_MESSAGE
    token = None
    if signer is not None and fingerprint and matches:
        token = signer.issue(fingerprint=fingerprint, entry_ids=[m.id for m in matches])
    return shapes.Answer(
        known=bool(matches),
        fingerprint=fingerprint,
        answer_token=token,
        message=message,
        matches=matches,
        related=related,
        foreign=foreign,
        parsed=parsed_out(parsed, shapes),
    )
