"""The answer to a pasted traceback: what was read, the known pitfalls that match, and why.

`answer_paste` is the one function behind the /match page, `POST /api/v1/match` and
`pitfalls match`; they differ only in how they show its result. Pasted text is never stored.
"""

import re
import threading

from pydantic import BaseModel
from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.change_feed import ChangeWatcher
from app.entry_details import SnippetOut, entry_url
from app.matching import SignatureMatcher, known_matches, match_paste
from app.normalization import normalize_message
from app.rendering import markdown_section, render_body
from app.search import IndexUnavailable, SearchService, SearchTooSlow
from app.tracebacks import ParsedPaste, parse_traceback

MAX_MATCHES = 5
MAX_RELATED = 5
NO_MATCH_MESSAGE = "No known pitfall matches this error."
NO_ERROR_MESSAGE = "No error message was found in the pasted text."
_PLACEHOLDER = re.compile(r"<\w+>")
_QUERY_NOISE = re.compile(r"[^\w\s\u3400-\u9fff]+")


class FrameOut(BaseModel):
    file: str
    line: int | None
    function: str | None
    code: str | None
    library: bool


class ExceptionOut(BaseModel):
    type: str
    qualified_type: str
    message: str
    link: str | None
    origin: str
    frames: list[FrameOut]


class WarningOut(BaseModel):
    category: str
    message: str
    file: str | None
    line: int | None


class ParsedOut(BaseModel):
    exceptions: list[ExceptionOut]
    warnings: list[WarningOut]
    final: int | None  # index of the exception the answer explains
    user_frame: FrameOut | None
    python_version: str | None
    torch_version: str | None
    normalized_message: str
    prefixes: list[str]


class WhyOut(BaseModel):
    signature: str
    example: str
    exception: str | None  # the signature's exception type
    matched_in: str  # final | worker | cause | context | earlier | warning | text
    subject: str  # the exception or warning line that matched
    span: tuple[int, int]  # of matched_text within the searched message
    matched_text: str


class MatchOut(BaseModel):
    id: str
    title: str
    summary: str
    kind: str
    url: str
    confidence: float
    why: WhyOut
    captures: dict[str, str]
    fix_markdown: str
    fix_html: str
    snippets: list[SnippetOut]


class RelatedOut(BaseModel):
    id: str
    title: str
    summary: str
    url: str
    score: float


class Answer(BaseModel):
    known: bool
    message: str
    matches: list[MatchOut]
    related: list[RelatedOut]  # when nothing is known: found by text, not a known match
    parsed: ParsedOut


class MatcherCache:
    """One compiled matcher per process, rebuilt when the database's change sequence moves."""

    def __init__(self, engine: Engine, check_interval_ms: int = 1000) -> None:
        self.engine = engine
        self._watcher = ChangeWatcher(engine, check_interval_ms)
        self._matcher: SignatureMatcher | None = None
        self._seq = -1
        self._lock = threading.Lock()

    def expire(self) -> None:
        self._watcher.expire()

    def current(self) -> SignatureMatcher:
        seq = self._watcher.poll(force=self._matcher is None)
        if seq is not None and seq != self._seq:
            with self._lock, Session(self.engine) as session:
                matcher = SignatureMatcher(storage.active_signature_records(session))
                matcher.match_message("warm up the DFA")  # the first match builds it lazily
                self._matcher, self._seq = matcher, seq
        assert self._matcher is not None
        return self._matcher


def _parsed_out(parsed: ParsedPaste) -> ParsedOut:
    def frame(f) -> FrameOut:
        return FrameOut(
            file=f.file, line=f.line, function=f.function, code=f.code, library=f.library
        )

    final = parsed.final
    user = parsed.user_frame
    return ParsedOut(
        exceptions=[
            ExceptionOut(
                type=e.type,
                qualified_type=e.qualified_type,
                message=e.message,
                link=e.link,
                origin=e.origin,
                frames=[frame(f) for f in e.frames],
            )
            for e in parsed.exceptions
        ],
        warnings=[
            WarningOut(category=w.category, message=w.message, file=w.file, line=w.line)
            for w in parsed.warnings
        ],
        final=parsed.exceptions.index(final) if final else None,
        user_frame=frame(user) if user else None,
        python_version=parsed.python_version,
        torch_version=parsed.torch_version,
        normalized_message=normalize_message(final.message) if final else "",
        prefixes=parsed.prefixes,
    )


def _search_text(parsed: ParsedPaste) -> str:
    final = parsed.final
    if final is not None:
        text = f"{final.type} {normalize_message(final.message)}"
    elif parsed.warnings:
        text = normalize_message(parsed.warnings[-1].message)
    else:
        text = normalize_message(parsed.text[-500:])
    text = _QUERY_NOISE.sub(" ", _PLACEHOLDER.sub(" ", text))
    return " ".join(text.split()[:40])


def answer_paste(
    text: str, *, engine: Engine, matcher: SignatureMatcher, search: SearchService | None
) -> Answer:
    parsed = parse_traceback(text)
    found = known_matches(match_paste(matcher, parsed))[:MAX_MATCHES]
    matches: list[MatchOut] = []
    with Session(engine) as session:
        entries = storage.get_entries(session, entry_ids=[m.entry_id for m in found])
        for match in found:
            entry = entries.get(match.entry_id)
            if entry is None or entry.archived:
                continue
            fix = markdown_section(entry.body_markdown, "Fix")
            snippets = storage.entry_snippets(session, entry_id=entry.id)
            hit = match.hit
            matches.append(
                MatchOut(
                    id=entry.id,
                    title=entry.title,
                    summary=entry.summary,
                    kind=entry.kind,
                    url=entry_url(entry.id),
                    confidence=match.confidence,
                    why=WhyOut(
                        signature=hit.signature.message,
                        example=hit.signature.example,
                        exception=hit.signature.exception,
                        matched_in=match.matched_in,
                        subject=match.subject,
                        span=hit.span,
                        matched_text=match.matched_text,
                    ),
                    captures=hit.captures,
                    fix_markdown=fix,
                    fix_html=render_body(fix).html if fix else "",
                    snippets=[SnippetOut.of(s) for s in snippets],
                )
            )
    related: list[RelatedOut] = []
    query = _search_text(parsed)
    if search is not None and query and not matches:
        known = {m.id for m in matches}
        try:
            result = search.search(
                query, limit=MAX_RELATED + len(known), highlights=False, facets=False
            )
        except (IndexUnavailable, SearchTooSlow):
            result = None  # the answer stands without the entries related by text
        related = (
            []
            if result is None
            else [
                RelatedOut(
                    id=h.id, title=h.title, summary=h.summary, url=entry_url(h.id), score=h.score
                )
                for h in result.hits
                if h.id not in known
            ][:MAX_RELATED]
        )
    if matches:
        message = f"Known pitfall: {matches[0].title}"
    elif parsed.exceptions or parsed.warnings:
        message = NO_MATCH_MESSAGE
    else:
        message = NO_ERROR_MESSAGE
    return Answer(
        known=bool(matches),
        message=message,
        matches=matches,
        related=related,
        parsed=_parsed_out(parsed),
    )
