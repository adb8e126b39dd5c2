"""The answer to a pasted traceback, as the API, the pages and the CLI show it: its shapes only.

Kept apart from the code that reads the database (app/answers.py) so that the CLI can answer
from its cache (app/local_cache.py) without importing SQLAlchemy; both build the same values.
A field changed here is changed in app/plain_answers.py too (a test compares them).
"""

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from app.plain_answers import entry_url

if TYPE_CHECKING:
    from app.models import Snippet

__all__ = ["entry_url"]  # and the models below; app.plain_answers has their plain twins


class SnippetOut(BaseModel):
    role: str
    options: dict[str, str]
    code: str
    line: int

    @classmethod
    def of(cls, row: "Snippet") -> "SnippetOut":
        return cls(role=row.role, options=row.options, code=row.code, line=row.line)


class OutcomeStats(BaseModel):
    worked: int = 0
    reports: int = 0
    failed_notes: list[str] = []  # what was tried when the fix did not help, newest first

    @property
    def text(self) -> str:
        return f"fixed it for {self.worked} of {self.reports}" if self.reports else ""


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
    matched_in: str  # final | worker | cause | context | earlier | warning | text | fragment
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
    change: int | None = Field(
        default=None,
        description="The highest change-feed number the matcher that answered had applied "
        "(null when it read no database): a later change is not reflected in this answer.",
    )
