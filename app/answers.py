"""The answer to a pasted traceback: what was read, the known pitfalls that match, and why.

`answer_paste` is the one function behind the /match page, `POST /api/v1/match` and
`pitfalls match`; they differ only in how they show its result. Pasted text is never stored.
"""

import re
import threading
from collections import OrderedDict
from typing import NamedTuple

from pydantic import BaseModel, Field
from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.answer_tokens import AnswerSigner
from app.change_feed import ChangeWatcher
from app.entry_details import SnippetOut, entry_url
from app.fingerprints import paste_fingerprint
from app.matching.paste_matcher import PasteMatcher
from app.metrics import MATCH_SECONDS
from app.normalization import normalize_message
from app.outcomes import OutcomeStats
from app.outcomes import stats as outcome_stats
from app.rendering import markdown_section, render_body
from app.torch_versions import outside_range, paste_torch_version
from app.tracebacks import ParsedPaste, parse_traceback

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
    ranks: list[int] = Field(default_factory=list, description="Ranks that printed this error.")


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
    tier: str = Field(
        description="signature: one of the entry's signatures matched (deterministic); "
        "likely: no signature matched, but the entry covers the error's words (calibrated)."
    )
    confidence: float = Field(
        description="For likely matches, calibrated: 0.8 is right about 80 % of the time."
    )
    why: WhyOut | None = Field(description="How a signature matched; null for likely matches.")
    likely_words: list[str] = Field(
        default_factory=list, description="For likely matches: the words that made it likely."
    )
    captures: dict[str, str]
    fix_markdown: str
    fix_html: str
    snippets: list[SnippetOut]
    outcomes: OutcomeStats = Field(
        default_factory=OutcomeStats,
        description="Reports on whether this entry's fix worked, for this error (fingerprint).",
    )
    outcomes_all: OutcomeStats = Field(
        default_factory=OutcomeStats,
        description="Reports on whether this entry's fix worked, for every error.",
    )
    version_note: str | None = Field(
        default=None,
        description="Set when the paste shows a torch version outside the entry's `versions` "
        "range: such a match is ranked after the ones whose range holds it.",
    )


class RelatedOut(BaseModel):
    id: str
    title: str
    summary: str
    url: str
    score: float = Field(description="Share of the error's rare words the entry holds (0-1).")


class Answer(BaseModel):
    known: bool = Field(description="True when `matches` is not empty (either tier).")
    fingerprint: str | None = Field(
        default=None,
        description="The error's stable id: its type and message with the values taken out, "
        "hashed (two OOMs of different sizes share one). Report outcomes with it.",
    )
    answer_token: str | None = Field(
        default=None,
        description="Signed proof that this server answered `fingerprint` with these matches "
        "(null without matches): POST /api/v1/outcomes needs it with the fingerprint and one "
        "of the matched ids; it is good for PITFALLS_ANSWER_TOKEN_DAYS.",
    )
    message: str
    matches: list[MatchOut] = Field(description="Signature matches first, then likely ones.")
    related: list[RelatedOut]  # when nothing matched: found by text, not a match
    foreign: str | None = Field(
        default=None,
        description="When nothing matched and the error comes from another library: its name.",
    )
    parsed: ParsedOut


class MatcherCache:
    """One compiled matcher (both tiers) per process, rebuilt when the change sequence moves."""

    def __init__(self, engine: Engine, check_interval_ms: int = 1000) -> None:
        self.engine = engine
        self._watcher = ChangeWatcher(engine, check_interval_ms)
        self._matcher: PasteMatcher | None = None
        self._mark: storage.FeedMark | None = None
        self._lock = threading.Lock()

    def expire(self) -> None:
        self._watcher.expire()

    @property
    def mark(self) -> storage.FeedMark | None:
        """The feed's mark the current matcher was built at."""
        return self._mark

    def current(self, at_least: storage.FeedMark | None = None) -> PasteMatcher:
        """The matcher; `at_least`: a feed mark the caller has already seen (the one an answer
        will be kept under), so the feed is read now rather than after the interval when this
        matcher is older than that."""
        # The mark may have been read by another thread (the feed follower) that is building
        # the new matcher right now: compare with the newest mark read by anyone, and wait on
        # the lock for that build instead of answering with the old matcher meanwhile.
        behind = at_least is not None and (
            self._mark is None
            or (self._mark.seq, self._mark.count) < (at_least.seq, at_least.count)
        )
        self._watcher.poll(force=self._matcher is None or behind)
        if self._matcher is not None and self._watcher.last == self._mark:
            return self._matcher
        with self._lock:
            mark = self._watcher.last
            if self._matcher is None or mark != self._mark:
                try:
                    with Session(self.engine) as session:
                        # Only what changed is compiled and read again.
                        matcher = PasteMatcher.build(
                            storage.active_signature_records(session),
                            storage.active_entry_texts(session),
                            previous=self._matcher,
                        )
                except Exception as error:
                    # The database went away between the mark and the read: answer with what
                    # this process has (it says so through health) rather than not at all.
                    if self._matcher is None or storage.database_problem(error) is None:
                        raise
                    return self._matcher
                # the first match builds the DFA lazily
                matcher.signatures.match_message("warm up the DFA")
                self._matcher, self._mark = matcher, mark
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
                ranks=e.ranks,
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


class EntryParts(NamedTuple):
    fix_markdown: str
    fix_html: str
    snippets: tuple[SnippetOut, ...]


class EntryPartsCache:
    """An answer's parts that depend on the entry's text alone, made once per text.

    Keyed by the entry's id and the hash of its whole Markdown (its snippets' line numbers count
    the front-matter), so a new revision is a new key and no database can be served another's
    parts; rendering the Fix with Pygments was half of what a paste cost. Bounded (LRU).
    """

    def __init__(self, max_entries: int = 2048) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str], EntryParts] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, session: Session, entry) -> EntryParts:
        key = (entry.id, entry.content_hash)
        with self._lock:
            parts = self._items.get(key)
            if parts is not None:
                self._items.move_to_end(key)
                return parts
        fix = markdown_section(entry.body_markdown, "Fix")
        snippets = storage.entry_snippets(session, entry_id=entry.id)
        parts = EntryParts(
            fix, render_body(fix).html if fix else "", tuple(SnippetOut.of(s) for s in snippets)
        )
        with self._lock:
            self._items[key] = parts
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)
        return parts


entry_parts = EntryPartsCache()


def _by_torch_version(matches: list[MatchOut], entries: dict, shown) -> list[MatchOut]:
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


def _entry_match(session: Session, entry, match, fingerprint: str | None = None) -> MatchOut:
    parts = entry_parts.get(session, entry)
    found = match.signature
    why = None
    if found is not None:
        hit = found.hit
        why = WhyOut(
            signature=hit.signature.message,
            example=hit.signature.example,
            exception=hit.signature.exception,
            matched_in=found.matched_in,
            subject=found.subject,
            span=hit.span,
            matched_text=found.matched_text,
        )
    return MatchOut(
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
        outcomes=outcome_stats(session, entry.id, fingerprint=fingerprint)
        if fingerprint
        else OutcomeStats(),
        outcomes_all=outcome_stats(session, entry.id),
    )


def answer_paste(
    text: str,
    *,
    engine: Engine,
    matcher: PasteMatcher,
    parsed: ParsedPaste | None = None,
    signer: AnswerSigner | None = None,
) -> Answer:
    """`parsed`, when the caller has already read `text`, saves reading it twice; `signer`
    gives an answer with matches the token that outcome reports on it must send back."""
    with MATCH_SECONDS.time():
        parsed = parsed if parsed is not None else parse_traceback(text)
        result = matcher.match(parsed)
    found = result.matches[:MAX_MATCHES]
    fingerprint = paste_fingerprint(parsed)
    related_ids = [c.entry_id for c in result.related[:MAX_RELATED]]
    matches: list[MatchOut] = []
    related: list[RelatedOut] = []
    with Session(engine) as session:
        entries = storage.get_entries(session, entry_ids=[m.entry_id for m in found] + related_ids)
        for match in found:
            entry = entries.get(match.entry_id)
            if entry is not None and not entry.archived:
                matches.append(_entry_match(session, entry, match, fingerprint))
        matches = _by_torch_version(matches, entries, paste_torch_version(text))
    if not matches:
        for candidate in result.related[:MAX_RELATED]:
            entry = entries.get(candidate.entry_id)
            if entry is not None and not entry.archived:
                related.append(
                    RelatedOut(
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
    return Answer(
        known=bool(matches),
        fingerprint=fingerprint,
        answer_token=token,
        message=message,
        matches=matches,
        related=related,
        foreign=foreign,
        parsed=_parsed_out(parsed),
    )


def answer_query(text: str, *, engine: Engine, matcher: PasteMatcher) -> Answer | None:
    """The answer to a search query that reads as error text (an exception or a warning
    line), or None for words: the search box and the search API put these matches first."""
    if not text.strip():
        return None
    parsed = parse_traceback(text)
    if not (parsed.exceptions or parsed.warnings):
        return None
    return answer_paste(text, engine=engine, matcher=matcher, parsed=parsed)


def search_with_matches(
    service, query: str, *, engine: Engine, matcher: PasteMatcher, **options
) -> dict:
    """A search's JSON (`SearchResult.to_dict`) with `matches`: the known and likely entries of
    error text in the query, best first (empty for plain words). Shared by the search API and
    the MCP tool, so an agent gets what a reader's page shows first."""
    result = service.search(query, **options).to_dict()
    answer = answer_query(query, engine=engine, matcher=matcher)
    result["matches"] = [m.model_dump(mode="json") for m in answer.matches] if answer else []
    return result
