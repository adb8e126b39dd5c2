"""Where answers come from: this process's database, matcher and index, or a running server's
JSON API. The faces that answer outside the web app (the MCP server, the notebook and script
hook, the CLI) share these, so each asks the same inner calls (or the same API) the same way.
"""

import json
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace
from typing import Protocol


class SourceError(Exception):
    """The answer cannot be had: the message says why (a face shows it as it shows errors)."""


class Pitfalls(Protocol):
    """Where the tools get their answers: this process's database, or a server's API."""

    def match(self, text: str) -> dict: ...
    def search(self, query: str, kind: str | None, tag: str | None, limit: int) -> dict: ...
    def entry(self, entry_id: str) -> dict | None: ...
    def outcome(self, report: dict) -> dict: ...


def _said(body: bytes) -> str:
    """The sentence of an API error (`{"error": {"message": ...}}`), else the body's start."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = None
    if isinstance(message, str) and message:
        return message
    return body.decode("utf-8", "replace")[:300]


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
            raise SourceError(f"the server answered {exc.code}: {_said(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SourceError(f"cannot reach {self.base}: {exc}") from None

    def match(self, text: str) -> dict:
        return self._call("POST", "/api/v1/match", {"text": text}) or {}

    def search(
        self, query: str, kind: str | None, tag: str | None, limit: int, page: int = 1
    ) -> dict:
        params = {"q": query, "limit": str(limit)}
        if page > 1:
            params["page"] = str(page)
        params.update({k: v for k, v in (("kind", kind), ("tag", tag)) if v})
        return self._call("GET", "/api/v1/search?" + urllib.parse.urlencode(params)) or {}

    def entry(self, entry_id: str) -> dict | None:
        return self._call("GET", f"/api/v1/entries/{urllib.parse.quote(entry_id, safe='')}")

    def outcome(self, report: dict) -> dict:
        return self._call("POST", "/api/v1/outcomes", report) or {}


class LocalPitfalls:
    """This process's database, matcher and index: the same inner calls the API makes.

    `state` holds `engine`, `settings`, `matchers`, `search` and `report_rules` (the web app's
    state, or the ones `pitfalls mcp` opened); `voter()` names who reports an outcome."""

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
            raise SourceError(
                f"The paste is larger than {self.settings.max_paste_bytes:,} bytes; paste the "
                "end of the traceback."
            )
        try:
            with in_force(Budget(self.settings.match_budget_ms / 1000)):
                answer = answer_paste(
                    text,
                    engine=self.engine,
                    matcher=self.matchers.current(),
                    signer=self.state.report_rules.signer,
                )
        except BudgetExceeded:
            raise SourceError(
                f"matching took longer than {self.settings.match_budget_ms} ms and was stopped"
            ) from None
        return answer.model_dump(mode="json")

    def search(self, query: str, kind: str | None, tag: str | None, limit: int) -> dict:
        from app.answers import search_with_matches
        from app.search import IndexUnavailable, SearchTooSlow

        try:
            return search_with_matches(
                self.search_service,
                query,
                engine=self.engine,
                matcher=self.matchers.current(),
                kind=kind,
                tag=tag,
                limit=limit,
            )
        except (IndexUnavailable, SearchTooSlow) as exc:
            raise SourceError(str(exc)) from None

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
            outcome = record_outcome(
                self.engine, voter=self.voter(), rules=self.state.report_rules, **report
            )
            return outcome.model_dump(mode="json")
        except OutcomeRefused as exc:
            raise SourceError(str(exc)) from None


def local_pitfalls(settings) -> LocalPitfalls:
    """For `pitfalls mcp` on this machine: the data dir prepared as `serve` would."""
    from app.answer_tokens import app_secret
    from app.answers import MatcherCache
    from app.bootstrap import prepare_data
    from app.outcomes import ReportRules
    from app.search import SearchService
    from app.storage import create_db_engine

    engine = create_db_engine(settings)
    prepare_data(settings, engine, ingest="if-empty")
    state = SimpleNamespace(
        engine=engine,
        settings=settings,
        matchers=MatcherCache(engine, settings.index_check_interval_ms),
        report_rules=ReportRules.of(settings, app_secret(settings, engine)),
        search=SearchService(
            settings.index_dir,
            engine,
            check_interval_ms=settings.index_check_interval_ms,
            budget_ms=settings.search_budget_ms,
            search_engine=settings.search_engine,
        ),
    )
    return LocalPitfalls(state)
