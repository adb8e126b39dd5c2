"""The MCP server: what a coding agent calls when a run dies.

Hand-written tools over the same inner functions as the JSON API, each with an output schema
(structured content) and an answer sized for an agent's context: `match_traceback` gives per
match the title, the fix (text and code), the captured values, a link and a resource link to
the whole entry, not the whole `/api/v1/match` answer; `search_pitfalls` the hits and matches
the same way; `get_pitfall` one entry in full (also the resource `pitfall://{id}`, its
Markdown); `report_outcome` (did the fix work). Protocol: the SDK's newest revision.

Two transports: stdio (`pitfalls mcp`, on the local database or a server's API with `--server`)
and streamable HTTP at `/mcp` inside the app, stateless so any replica answers any request, with
the API's rights: anyone when reading is public, else a token; an outcome report needs what
`POST /api/v1/outcomes` needs (the answer's token), nothing more.
"""

import contextvars
import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import CallToolResult, ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from app import __version__
from app.answer_sources import Pitfalls, SourceError
from app.entry_details import EntryDetails
from app.outcomes import MAX_NOTE_SENT, OutcomeOut

INSTRUCTIONS = (
    "A team's knowledge base of PyTorch pitfalls with verified fixes. When a PyTorch run fails, "
    "call match_traceback with the whole traceback first: a 'signature' match is certain, a "
    "'likely' one carries a calibrated confidence, and no match means the error is unknown here "
    "(do not guess an entry). Each match carries its fix; read its resource (pitfall://ID) or "
    "call get_pitfall for the whole entry. Use search_pitfalls for questions in words, and "
    "report_outcome once you know whether a suggested fix worked."
)
RESOURCE = "pitfall://{id}"

# Who the HTTP transport let in (the API token's principal, or anonymous on a public site), the
# voter its reports count for, and the site's address for links; stdio runs as the local user.
current_principal: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "mcp_principal", default=None
)
current_voter: contextvars.ContextVar[str] = contextvars.ContextVar("mcp_voter", default="")
current_link_base: contextvars.ContextVar[str] = contextvars.ContextVar("mcp_link_base", default="")


class PitfallMatch(BaseModel):
    """One known pitfall that matches the error: enough to apply the fix."""

    id: str
    title: str
    summary: str
    tier: str = Field(
        description="signature: one of the entry's signatures matched (certain); likely: the "
        "entry covers the error's words (see confidence)."
    )
    confidence: float = Field(description="Calibrated: 0.8 is right about 80 % of the time.")
    captures: dict[str, str] = Field(description="Values the signature took from the message.")
    fix: str = Field(description="The entry's Fix section as Markdown, its code included.")
    url: str = Field(description="The entry's page (absolute when the site's address is known).")
    resource: str = Field(description="The whole entry: resources/read, or get_pitfall(id).")
    outcomes: str = Field(
        "", description="What reports say of this fix, e.g. 'fixed it for 3 of 4'; empty if none."
    )
    version_note: str | None = Field(
        None, description="Set when the paste's torch version is outside the entry's range."
    )


class RelatedPitfall(BaseModel):
    """An entry that shares words with an error nothing matched: worth reading, not a match."""

    id: str
    title: str
    url: str
    resource: str


class MatchAnswer(BaseModel):
    known: bool = Field(description="True when `matches` is not empty.")
    message: str
    fingerprint: str | None = Field(
        None, description="The error's stable id (values taken out): report_outcome needs it."
    )
    answer_token: str | None = Field(
        None, description="Proof of this answer (null without matches): report_outcome needs it."
    )
    matches: list[PitfallMatch] = Field(description="Signature matches first, then likely ones.")
    related: list[RelatedPitfall] = Field(description="When nothing matched: found by text.")
    foreign: str | None = Field(
        None, description="When nothing matched and the error comes from another library."
    )


class SearchHit(BaseModel):
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    url: str
    resource: str


class SearchAnswer(BaseModel):
    query: str
    total: int = Field(description="Entries found in all; `hits` holds the first `limit`.")
    hits: list[SearchHit]
    matches: list[PitfallMatch] = Field(
        description="When the query reads as error text: the pitfalls that match it, first."
    )
    suggestion: str | None = Field(None, description="A query with the spelling corrected.")
    corrected_from: str | None = Field(
        None, description="The query typed, when these are the corrected query's results."
    )
    relaxed: bool = Field(False, description="No entry had every word; these have some.")
    loose_total: int = Field(
        0, description="Entries that share only a word or two with the query, not counted."
    )
    filter_note: str | None = Field(
        None, description="When the query's filters left nothing: which one, as a sentence."
    )
    ambiguous: dict[str, list[str]] = Field(
        default_factory=dict,
        description="When two or three entries fit the query about equally: each one's id, "
        "with the words of its title and summary that the others' do not hold.",
    )


class PitfallEntry(EntryDetails):
    """An entry as get_pitfall gives it: its Markdown, not the HTML rendering of it as well."""

    html: SkipJsonSchema[str] = Field("", exclude=True)


def _outcomes_text(match: dict) -> str:
    here = match.get("outcomes") or {}
    everywhere = match.get("outcomes_all") or {}
    parts = []
    if here.get("reports"):
        parts.append(f"fixed it for {here['worked']} of {here['reports']} with this error")
    if everywhere.get("reports") and everywhere != here:
        parts.append(f"for {everywhere['worked']} of {everywhere['reports']} in all")
    return "; ".join(parts)


def build_server(
    pitfalls: Pitfalls,
    *,
    check_scope: Callable[[str], None] | None = None,
    link_base: Callable[[], str] = current_link_base.get,
) -> MCPServer:
    """The MCP server over `pitfalls`. `check_scope(scope)` raises ToolError when the caller may
    not (HTTP: the token's scope); None allows everything (stdio: the local user). `link_base()`
    is the site's address that makes an entry's path a link ("" leaves it a path)."""

    def allowed(scope: str) -> None:
        if check_scope is not None:
            check_scope(scope)

    def ask(method: str, *args):
        try:
            return getattr(pitfalls, method)(*args)
        except SourceError as exc:
            raise ToolError(str(exc)) from None

    def link(path: str) -> str:
        base = link_base().rstrip("/")
        return base + path if base and path.startswith("/") else path

    def concise(match: dict) -> PitfallMatch:
        return PitfallMatch(
            id=match["id"],
            title=match["title"],
            summary=match.get("summary", ""),
            tier=match.get("tier", ""),
            confidence=match.get("confidence", 0.0),
            captures=match.get("captures") or {},
            fix=match.get("fix_markdown", ""),
            url=link(match["url"]),
            resource=RESOURCE.format(id=match["id"]),
            outcomes=_outcomes_text(match),
            version_note=match.get("version_note"),
        )

    def resource_link(entry_id: str, title: str) -> ResourceLink:
        return ResourceLink(
            type="resource_link",
            uri=RESOURCE.format(id=entry_id),
            name=entry_id,
            title=title,
            mime_type="text/markdown",
        )

    def result(answer: BaseModel, links: list[ResourceLink]) -> CallToolResult:
        data = answer.model_dump(mode="json")
        # The JSON again as text, for clients that read no structured content (the spec's
        # advice), compact: the answer is read into an agent's context.
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return CallToolResult(
            content=[TextContent(type="text", text=text), *links], structured_content=data
        )

    server = MCPServer(
        "pitfalls",
        title="Pitfalls",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only)
    def match_traceback(text: str) -> Annotated[CallToolResult, MatchAnswer]:
        """Explain a traceback or error message: the known pitfalls that match it, best first,
        each with its tier ('signature' certain, 'likely' with a calibrated confidence), the
        values captured from the message, the fix (Markdown with its code), a link, and the
        entry as a resource; `fingerprint` and `answer_token` are for report_outcome. No match
        means the error is unknown here."""
        allowed("read")
        answer = ask("match", text)
        matches = [concise(m) for m in answer.get("matches", [])]
        related = [
            RelatedPitfall(
                id=r["id"],
                title=r["title"],
                url=link(r["url"]),
                resource=RESOURCE.format(id=r["id"]),
            )
            for r in answer.get("related", [])
        ]
        out = MatchAnswer(
            known=bool(answer.get("known")),
            message=answer.get("message", ""),
            fingerprint=answer.get("fingerprint"),
            answer_token=answer.get("answer_token"),
            matches=matches,
            related=related,
            foreign=answer.get("foreign"),
        )
        links = [resource_link(m.id, m.title) for m in matches]
        return result(out, links + [resource_link(r.id, r.title) for r in related])

    @server.tool(annotations=read_only)
    def search_pitfalls(
        query: str, kind: str | None = None, tag: str | None = None, limit: int = 10
    ) -> Annotated[CallToolResult, SearchAnswer]:
        """Search the entries by words, identifiers or Chinese; `kind` is one of error,
        warning, silent, hang, perf, howto; `tag` narrows to one tag. Error text in the query
        also gives its matches, as match_traceback does."""
        allowed("read")
        found = ask("search", query, kind, tag, max(1, min(limit, 50)))
        hits = [
            SearchHit(
                id=h["id"],
                title=h["title"],
                summary=h["summary"],
                kind=h["kind"],
                tags=h["tags"],
                url=link(h["url"]),
                resource=RESOURCE.format(id=h["id"]),
            )
            for h in found.get("hits", [])
        ]
        out = SearchAnswer(
            query=found.get("query", query),
            total=found.get("total", len(hits)),
            hits=hits,
            matches=[concise(m) for m in found.get("matches", [])],
            suggestion=found.get("suggestion"),
            corrected_from=found.get("corrected_from"),
            relaxed=bool(found.get("relaxed")),
            loose_total=int(found.get("loose_total") or 0),
            filter_note=(found.get("filter_note") or {}).get("message"),
            ambiguous={
                e["id"]: e["words"] for e in (found.get("ambiguous") or {}).get("entries", [])
            },
        )
        titles = {m.id: m.title for m in out.matches}
        titles.update((h.id, h.title) for h in hits if h.id not in titles)
        return result(out, [resource_link(i, title) for i, title in titles.items()])

    @server.tool(annotations=read_only)
    def get_pitfall(id: str) -> Annotated[CallToolResult, PitfallEntry]:
        """One entry in full: title, summary, the Markdown (what you see, why, the fix), its
        signatures and snippets, and whether its code was verified."""
        allowed("read")
        entry = ask("entry", id)
        if entry is None:
            raise ToolError(f"there is no entry {id!r}; search_pitfalls finds entries")
        details = PitfallEntry.model_validate(entry)
        details.url = link(details.url)
        for related in details.related:
            related.url = link(related.url)
        return result(details, [])

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    def report_outcome(
        fingerprint: str, id: str, worked: bool, answer_token: str, note: str = ""
    ) -> OutcomeOut:
        """Say whether the fix of entry `id` worked for the error `fingerprint`: both, and
        `answer_token`, from the match_traceback answer that suggested the entry; `note` says
        what was tried. The entry's measured rate counts it."""
        allowed("read")  # the API's rule: whoever may read may report on an answer they got
        if len(note) > MAX_NOTE_SENT:
            raise ToolError(
                f"the note is longer than {MAX_NOTE_SENT} characters; say what was tried in a "
                "sentence or two"
            )
        report = {
            "fingerprint": fingerprint,
            "id": id,
            "worked": worked,
            "answer_token": answer_token,
            "note": note,
        }
        return OutcomeOut.model_validate(ask("outcome", report))

    @server.resource(
        RESOURCE,
        name="pitfall",
        title="A pitfall entry",
        mime_type="text/markdown",
        description="An entry's whole Markdown: what you see, why it happens, the fix.",
    )
    def pitfall_resource(id: str) -> str:
        try:
            allowed("read")
            entry = ask("entry", id)
        except ToolError as exc:
            raise ResourceError(str(exc)) from None
        if entry is None:
            raise ResourceNotFoundError(f"there is no entry {id!r}; search_pitfalls finds entries")
        return entry["markdown"]

    return server
