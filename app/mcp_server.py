"""The MCP server: what a coding agent calls when a run dies.

Hand-written tools over the same inner functions as the JSON API, so an agent gets exactly what
`/api/v1/match` and `/api/v1/search` give: `match_traceback` (matches with tier, confidence,
why, captures, the fix as Markdown and the snippets that check it), `search_pitfalls`,
`get_pitfall`, and `report_outcome` (did the fix work). Entries are resources `pitfall://{id}`.

Two transports: stdio (`pitfalls mcp`, on the local database or a server's API with `--server`)
and streamable HTTP at `/mcp` inside the app, stateless so any replica answers any request, with
the API's rights: anyone when reading is public, else a token; an outcome report needs what
`POST /api/v1/outcomes` needs (the answer's token), nothing more.
"""

import contextvars
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from app import __version__
from app.answer_sources import Pitfalls, SourceError
from app.answers import Answer
from app.entry_details import EntryDetails
from app.outcomes import MAX_NOTE_SENT

INSTRUCTIONS = (
    "A team's knowledge base of PyTorch pitfalls with verified fixes. When a PyTorch run fails, "
    "call match_traceback with the whole traceback first: a 'signature' match is certain, a "
    "'likely' one carries a calibrated confidence, and no match means the error is unknown here "
    "(do not guess an entry). Use search_pitfalls for questions in words, get_pitfall for an "
    "entry's full text, and report_outcome once you know whether a suggested fix worked."
)

# Who the HTTP transport let in (the API token's principal, or anonymous on a public site) and
# the voter its reports count for; stdio runs as the local user.
current_principal: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "mcp_principal", default=None
)
current_voter: contextvars.ContextVar[str] = contextvars.ContextVar("mcp_voter", default="")


class OutcomeIn(BaseModel):
    fingerprint: str = Field(description="The answer's `fingerprint` for the error.")
    id: str = Field(description="The entry whose fix was tried.")
    worked: bool = Field(description="True when the fix made the error go away.")
    answer_token: str = Field(description="The answer's `answer_token`.")
    note: str = Field("", description="What was tried, in a sentence.")


def build_server(pitfalls: Pitfalls, *, check_scope=None) -> MCPServer:
    """The MCP server over `pitfalls`. `check_scope(scope)` raises ToolError when the caller may
    not (HTTP: the token's scope); None allows everything (stdio: the local user)."""

    def allowed(scope: str) -> None:
        if check_scope is not None:
            check_scope(scope)

    def ask(method: str, *args):
        try:
            return getattr(pitfalls, method)(*args)
        except SourceError as exc:
            raise ToolError(str(exc)) from None

    server = MCPServer(
        "pitfalls",
        title="Pitfalls",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only)
    def match_traceback(text: str) -> Answer:
        """Explain a traceback or error message: the known pitfalls that match it, best first,
        each with tier ('signature' certain, 'likely' with a calibrated confidence), why it
        matched, the values captured from the message, the fix as Markdown and the code that
        checks it; `fingerprint` names the error for report_outcome. No match means unknown."""
        allowed("read")
        return Answer.model_validate(ask("match", text))

    @server.tool(annotations=read_only)
    def search_pitfalls(
        query: str, kind: str | None = None, tag: str | None = None, limit: int = 10
    ) -> dict[str, Any]:
        """Search the entries by words, identifiers or Chinese; `kind` is one of error,
        warning, silent, hang, perf, howto; `tag` narrows to one tag."""
        allowed("read")
        return ask("search", query, kind, tag, max(1, min(limit, 50)))

    @server.tool(annotations=read_only)
    def get_pitfall(id: str) -> EntryDetails:
        """One entry in full: title, summary, the Markdown (what you see, why, the fix), its
        signatures and snippets, and whether its code was verified."""
        allowed("read")
        entry = ask("entry", id)
        if entry is None:
            raise ToolError(f"there is no entry {id!r}; search_pitfalls finds entries")
        return EntryDetails.model_validate(entry)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    def report_outcome(
        fingerprint: str, id: str, worked: bool, answer_token: str, note: str = ""
    ) -> dict[str, Any]:
        """Say whether the fix of entry `id` worked for the error `fingerprint`: both, and
        `answer_token`, from the match_traceback answer that suggested the entry; `note` says
        what was tried. The entry's measured rate counts it."""
        allowed("read")  # the API's rule: whoever may read may report on an answer they got
        if len(note) > MAX_NOTE_SENT:
            raise ToolError(
                f"the note is longer than {MAX_NOTE_SENT} characters; say what was tried in a "
                "sentence or two"
            )
        report = OutcomeIn(
            fingerprint=fingerprint, id=id, worked=worked, answer_token=answer_token, note=note
        )
        return ask("outcome", report.model_dump())

    @server.resource(
        "pitfall://{id}", name="pitfall", mime_type="text/markdown", description="An entry"
    )
    def pitfall_resource(id: str) -> str:
        allowed("read")
        entry = ask("entry", id)
        if entry is None:
            raise ToolError(f"there is no entry {id!r}")
        return entry["markdown"]

    return server
