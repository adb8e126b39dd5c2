"""Everything a reader sees of one entry, as one value: the entry page, its JSON twin and the
CLI all show this.
"""

import re
from collections.abc import Sequence
from html import unescape

from pydantic import BaseModel, Field
from sqlmodel import Session

from app import storage
from app.answer_shapes import OutcomeStats, SnippetOut, entry_url
from app.models import Snippet, UtcTimestamp
from app.outcomes import stats as outcome_stats


class SignatureOut(BaseModel):
    exception: str | None
    message: str
    frame: str | None
    context: str | None = None
    example: str


class VerificationOut(BaseModel):
    """The newest `pitfalls verify` result of each snippet, for the code it has now."""

    status: str  # verified | failing | partly verified | unverified
    passed: int
    failed: int
    skipped: int
    torch_version: str | None
    python_version: str | None
    platform: str | None
    verified_at: UtcTimestamp | None
    skipped_reasons: list[str]
    skipped_need_gpu: bool = Field(
        default=False,
        description="Every skipped snippet declares a GPU (requires cuda or mps): it is not "
        "unverified for lack of trying, it needs a machine with one.",
    )


class RelatedOut(BaseModel):
    id: str
    title: str
    url: str


class EntryDetails(BaseModel):
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    aliases: list[str]
    questions: list[str]
    versions: str | None
    related: list[RelatedOut]
    sources: list[str]
    html: str
    markdown: str
    revision: int
    revisions: int
    archived: bool
    created_at: UtcTimestamp
    updated_at: UtcTimestamp
    url: str
    signatures: list[SignatureOut]
    snippets: list[SnippetOut]
    verification: VerificationOut
    outcomes: OutcomeStats = Field(
        default_factory=OutcomeStats,
        description="Reports on whether this entry's fix worked (every error it was tried on).",
    )


class TocItem(BaseModel):
    id: str  # the heading's anchor
    title: str
    level: int  # 2 for a section, 3 for a part of one


# The body HTML is our own rendering (raw HTML off, an id on every h2-h4), so its headings have
# one shape: <h2 id="slug">Title <a class="header-anchor" href="#slug">#</a></h2>.
_HEADING = re.compile(r'<h([23]) id="([^"]+)">(.*?)</h\1>', re.DOTALL)
_ANCHOR_LINK = re.compile(r'\s*<a class="header-anchor"[^>]*>#</a>')
_TAG = re.compile(r"<[^>]+>")
_SECTION_START = re.compile(r'(?=<h2 id=")')


def table_of_contents(html: str) -> list[TocItem]:
    """The h2 and h3 headings of rendered body HTML, in order, as plain text with their anchors."""
    return [
        TocItem(
            id=m[2],
            title=unescape(_TAG.sub("", _ANCHOR_LINK.sub("", m[3]))).strip(),
            level=int(m[1]),
        )
        for m in _HEADING.finditer(html)
    ]


def fix_first(html: str) -> tuple[str, str]:
    """The body in reading order, cut in two: whatever comes before the first section with the
    Fix section, then the other sections as written. A reader who arrives from an error wants
    the fix on the first screen; the symptoms and the why are one link away. A body without a
    Fix section comes back whole, as the first part."""
    parts = _SECTION_START.split(html)
    intro, sections = parts[0], parts[1:]
    for index, section in enumerate(sections):
        heading = _HEADING.match(section)
        if heading and _TAG.sub("", heading[3]).strip().lower().startswith(("fix", "the fix")):
            return intro + section, "".join(sections[:index] + sections[index + 1 :])
    return html, ""


_GPU_REASON = re.compile(r"requires (?:cuda|mps)\b")


def verification_summary(
    session: Session, *, entry_id: str, snippets: Sequence[Snippet]
) -> VerificationOut:
    """Results of snippets that really ran; a snippet without one that declares `requires=` is
    counted as skipped, with what it declares as the reason."""
    rows = storage.latest_verifications(session, entry_id=entry_id)
    ran = {r.snippet_position for r in rows}
    declared = [
        f"requires {s.options['requires']}"
        for s in snippets
        if s.position not in ran and s.options.get("requires")
    ]
    counts = {status: sum(r.status == status for r in rows) for status in ("passed", "failed")}
    counts["skipped"] = len(declared)
    if counts["failed"]:
        status = "failing"
    elif counts["passed"] and counts["passed"] == len(snippets):
        status = "verified"
    elif counts["passed"]:
        status = "partly verified"
    else:
        status = "unverified"
    newest = max(rows, key=lambda r: r.verified_at) if rows else None
    return VerificationOut(
        status=status,
        **counts,
        torch_version=newest.torch_version if newest else None,
        python_version=newest.python_version if newest else None,
        platform=newest.platform if newest else None,
        verified_at=newest.verified_at if newest else None,
        skipped_reasons=sorted(set(declared)),
        skipped_need_gpu=bool(declared) and all(_GPU_REASON.match(r) for r in declared),
    )


def get_entry_details(session: Session, entry_id: str) -> EntryDetails | None:
    entry = storage.get_entry(session, entry_id)
    if entry is None:
        return None
    snippets = storage.entry_snippets(session, entry_id=entry.id)
    return EntryDetails(
        id=entry.id,
        title=entry.title,
        summary=entry.summary,
        kind=entry.kind,
        tags=entry.tags,
        aliases=entry.aliases,
        questions=entry.questions,
        versions=entry.versions,
        related=[
            RelatedOut(id=r.id, title=r.title, url=entry_url(r.id))
            for r in storage.get_entries(session, entry_ids=entry.related).values()
            if not r.archived
        ],
        sources=entry.sources,
        html=entry.body_html,
        markdown=storage.current_markdown(session, entry=entry),
        revision=entry.revision,
        revisions=storage.count_revisions(session, entry_id=entry.id),
        archived=entry.archived,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        url=entry_url(entry.id),
        signatures=[
            SignatureOut(
                exception=s.exception,
                message=s.message,
                frame=s.frame,
                context=s.context,
                example=s.example,
            )
            for s in storage.entry_signatures(session, entry_id=entry.id)
        ],
        snippets=[SnippetOut.of(s) for s in snippets],
        verification=verification_summary(session, entry_id=entry.id, snippets=snippets),
        outcomes=outcome_stats(session, entry.id),
    )
