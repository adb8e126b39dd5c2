"""The MCP server: what a coding agent calls when a run dies.

Hand-written tools over the same inner functions as the JSON API, so an agent gets exactly what
`/api/v1/match` and `/api/v1/search` give: `match_traceback` (matches with tier, confidence,
why, captures, the fix as Markdown and the snippets that check it), `search_pitfalls`,
`get_pitfall`, and `report_outcome` (did the fix work). Entries are resources `pitfall://{id}`.

Two transports: stdio (`pitfalls mcp`, on the local database or a server's API with `--server`)
and streamable HTTP at `/mcp` inside the app, stateless so any replica answers any request, and
behind the API's bearer tokens (read for lookups, write for outcomes).
"""

import contextvars
import json
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace
from typing import Any, Protocol

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from app import __version__
from app.answers import Answer
from app.entry_details import EntryDetails

INSTRUCTIONS = (
    "A team's knowledge base of PyTorch pitfalls with verified fixes. When a PyTorch run fails, "
    "call match_traceback with the whole traceback first: a 'signature' match is certain, a "
    "'likely' one carries a calibrated confidence, and no match means the error is unknown here "
    "(do not guess an entry). Use search_pitfalls for questions in words, get_pitfall for an "
    "entry's full text, and report_outcome once you know whether a suggested fix worked."
)

# Who the HTTP transport authenticated (the API token's principal); stdio runs as the local user.
current_principal: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "mcp_principal", default=None
)


class Pitfalls(Protocol):
    """Where the tools get their answers: this process's database, or a server's API."""

    def match(self, text: str) -> dict: ...
    def search(self, query: str, kind: str | None, tag: str | None, limit: int) -> dict: ...
    def entry(self, entry_id: str) -> dict | None: ...
    def outcome(self, report: dict) -> dict: ...


class OutcomeIn(BaseModel):
    fingerprint: str = Field(description="The answer's `fingerprint` for the error.")
    id: str = Field(description="The entry whose fix was tried.")
    worked: bool = Field(description="True when the fix made the error go away.")
    note: str = Field("", max_length=500, description="What was tried, in a sentence.")


class RemotePitfalls:
    """A running Pitfalls server's JSON API (`pitfalls mcp --server URL [--token T]`)."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: dict | None = None) -> dict | None:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "GET":
                return None
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise ToolError(f"the server answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ToolError(f"cannot reach {self.base}: {exc}") from None

    def match(self, text: str) -> dict:
        return self._call("POST", "/api/v1/match", {"text": text}) or {}

    def search(self, query: str, kind: str | None, tag: str | None, limit: int) -> dict:
        params = {"q": query, "limit": str(limit)}
        params.update({k: v for k, v in (("kind", kind), ("tag", tag)) if v})
        return self._call("GET", "/api/v1/search?" + urllib.parse.urlencode(params)) or {}

    def entry(self, entry_id: str) -> dict | None:
        return self._call("GET", f"/api/v1/entries/{urllib.parse.quote(entry_id, safe='')}")

    def outcome(self, report: dict) -> dict:
        return self._call("POST", "/api/v1/outcomes", report) or {}


def build_server(pitfalls: Pitfalls, *, check_scope=None) -> MCPServer:
    """The MCP server over `pitfalls`. `check_scope(scope)` raises ToolError when the caller may
    not (HTTP: the token's scope); None allows everything (stdio: the local user)."""

    def allowed(scope: str) -> None:
        if check_scope is not None:
            check_scope(scope)

    server = MCPServer(
        "pitfalls",
        title="Pitfalls",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False)

    @server.tool(annotations=read_only)
    def match_traceback(text: str) -> Answer:
        """Explain a traceback or error message: the known pitfalls that match it, best first,
        each with tier ('signature' certain, 'likely' with a calibrated confidence), why it
        matched, the values captured from the message, the fix as Markdown and the code that
        checks it; `fingerprint` names the error for report_outcome. No match means unknown."""
        allowed("read")
        return Answer.model_validate(pitfalls.match(text))

    @server.tool(annotations=read_only)
    def search_pitfalls(
        query: str, kind: str | None = None, tag: str | None = None, limit: int = 10
    ) -> dict[str, Any]:
        """Search the entries by words, identifiers or Chinese; `kind` is one of error,
        warning, silent, hang, perf, howto; `tag` narrows to one tag."""
        allowed("read")
        return pitfalls.search(query, kind, tag, max(1, min(limit, 50)))

    @server.tool(annotations=read_only)
    def get_pitfall(id: str) -> EntryDetails:
        """One entry in full: title, summary, the Markdown (what you see, why, the fix), its
        signatures and snippets, and whether its code was verified."""
        allowed("read")
        entry = pitfalls.entry(id)
        if entry is None:
            raise ToolError(f"there is no entry {id!r}; search_pitfalls finds entries")
        return EntryDetails.model_validate(entry)

    @server.tool(
        annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True, openWorldHint=False)
    )
    def report_outcome(fingerprint: str, id: str, worked: bool, note: str = "") -> dict[str, Any]:
        """Say whether the fix of entry `id` worked for the error `fingerprint` (from
        match_traceback); `note` says what was tried. The entry's measured rate counts it."""
        allowed("write")
        report = OutcomeIn(fingerprint=fingerprint, id=id, worked=worked, note=note)
        return pitfalls.outcome(report.model_dump())

    @server.resource(
        "pitfall://{id}", name="pitfall", mime_type="text/markdown", description="An entry"
    )
    def pitfall_resource(id: str) -> str:
        allowed("read")
        entry = pitfalls.entry(id)
        if entry is None:
            raise ToolError(f"there is no entry {id!r}")
        return entry["markdown"]

    return server


class LocalPitfalls:
    """This process's database, matcher and index: the same inner calls the API makes.

    `state` holds `engine`, `settings`, `matchers` and `search` (the web app's state, or the ones
    `pitfalls mcp` opened); `voter()` names who reports an outcome."""

    def __init__(self, state, voter=None) -> None:
        self.state = state
        self.voter = voter or (lambda: "mcp:local")

    @property
    def engine(self):
        return self.state.engine

    @property
    def settings(self):
        return self.state.settings

    @property
    def matchers(self):
        return self.state.matchers

    @property
    def search_service(self):
        return self.state.search

    def match(self, text: str) -> dict:
        from app.answers import answer_paste
        from app.budget import Budget, BudgetExceeded, in_force

        if len(text.encode("utf-8", "surrogatepass")) > self.settings.max_paste_bytes:
            raise ToolError(
                f"the paste is over {self.settings.max_paste_bytes} bytes: send the end of it"
            )
        try:
            with in_force(Budget(self.settings.match_budget_ms / 1000)):
                answer = answer_paste(text, engine=self.engine, matcher=self.matchers.current())
        except BudgetExceeded:
            raise ToolError(
                f"matching took longer than {self.settings.match_budget_ms} ms and was stopped"
            ) from None
        return answer.model_dump(mode="json")

    def search(self, query: str, kind: str | None, tag: str | None, limit: int) -> dict:
        from app.search import IndexUnavailable, SearchTooSlow

        try:
            return self.search_service.search(query, kind=kind, tag=tag, limit=limit).to_dict()
        except (IndexUnavailable, SearchTooSlow) as exc:
            raise ToolError(str(exc)) from None

    def entry(self, entry_id: str) -> dict | None:
        from sqlmodel import Session

        from app.entry_details import get_entry_details

        with Session(self.engine) as session:
            details = get_entry_details(session, entry_id)
        if details is None or details.archived:
            return None
        return details.model_dump(mode="json")

    def outcome(self, report: dict) -> dict:
        from app.outcomes import OutcomeRefused, record_outcome

        try:
            return record_outcome(self.engine, voter=self.voter(), **report).model_dump(mode="json")
        except OutcomeRefused as exc:
            raise ToolError(str(exc)) from None


def local_pitfalls(settings) -> LocalPitfalls:
    """For `pitfalls mcp` on this machine: the data dir prepared as `serve` would."""
    from app.answers import MatcherCache
    from app.bootstrap import prepare_data
    from app.search import SearchService
    from app.storage import create_db_engine

    engine = create_db_engine(settings)
    prepare_data(settings, engine, ingest="if-empty")
    state = SimpleNamespace(
        engine=engine,
        settings=settings,
        matchers=MatcherCache(engine, settings.index_check_interval_ms),
        search=SearchService(
            settings.index_dir,
            engine,
            check_interval_ms=settings.index_check_interval_ms,
            budget_ms=settings.search_budget_ms,
        ),
    )
    return LocalPitfalls(state)
