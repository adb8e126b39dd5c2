"""The JSON API under /api/v1: the same data the pages show, for bots and CI jobs."""

import json
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app import storage
from app.answers import search_with_matches
from app.catalog import NotFound, Overview, TagPage, get_overview, get_tag_page
from app.entry_details import EntryDetails, get_entry_details
from app.inbox import ClusterOut
from app.inbox import clusters as inbox_clusters
from app.matching import SignatureMatcher
from app.models import utc_iso
from app.outcomes import FINGERPRINT, MAX_NOTE_SENT, OutcomeOut, OutcomeRefused, record_outcome
from app.rendering import render_body
from app.search import SearchService
from app.search.index import read_state
from app.web.auth import SESSION_COOKIE, Editor, check_csrf, get_principal, read_access
from app.web.deps import MAX_STORED_INT, RevisionNumber, SearchDep, SessionDep, SettingsDep
from app.web.limits import decoded, read_write_body
from app.web.paths import site_path
from app.wiki import (
    ChangeOut,
    EditConflict,
    RevisionDetail,
    RevisionOut,
    TesterResult,
    archive,
    check_draft,
    recent_changes,
    restore,
    revision_detail,
    revision_history,
    save_draft,
    try_paste,
)

# ---- errors, as OpenAPI documents them -------------------------------------------------------


class ProblemOut(BaseModel):
    line: int
    message: str
    severity: str


class ErrorDetail(BaseModel):
    status: int = Field(description="The HTTP status again.", examples=[404])
    message: str = Field(description="What went wrong and what to do, in a sentence or two.")
    problems: list[ProblemOut] | None = Field(
        None, description="A refused entry's problems, by line (422 and 409 from a save)."
    )
    current_revision: int | None = Field(
        None, description="The entry's current revision (412); the `ETag` header carries it too."
    )


class ErrorResponse(BaseModel):
    """Every error of the API has this shape: `{"error": {"status": ..., "message": ...}}`."""

    error: ErrorDetail


# What each status means here; a route lists the ones its guards and its work can answer.
ERROR_MEANINGS = {
    400: "The body or a header cannot be read: not JSON, not UTF-8, nested too deeply, or an "
    "If-Match that is not a list of entity tags.",
    401: "No valid credentials: the bearer token is unknown, expired or revoked, or the route "
    "needs a login or a token (writing always; reading when PITFALLS_PUBLIC_READ=false).",
    403: "The token's scope or the user's role does not allow this, or a browser session sent "
    "no CSRF token.",
    404: "There is no such entry or revision.",
    409: "The entry's id is taken by another entry; `problems` says where.",
    412: "If-Match names none of the entry's current revision (someone saved since); "
    "`current_revision` and the `ETag` header say which is current.",
    413: "The body is larger than the limit.",
    422: "The request or the entry does not pass validation; for an entry, `problems` lists "
    "what to fix by line.",
    428: "If-Match is missing: send the ETag of the revision you edited (or `*`).",
    429: "Too many reports from this address without a login or token; try again later.",
    503: "Searching or matching is unavailable for a moment, or took longer than its budget; "
    "or a write waited too long for its turn (nothing was saved); or the database is "
    "unreachable or its disk is full.",
}


def errors(*statuses: int) -> dict[int | str, dict]:
    """`responses=` for a route: each status with its meaning and the one error shape."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_MEANINGS[status]}
        for status in sorted(statuses)
    }


# Every route of `router` may answer 401 (a bad token; a login when reading is private).
router = APIRouter(
    prefix="/api/v1", tags=["api"], dependencies=[Depends(read_access)], responses=errors(401)
)
# Health stays open: load balancers and uptime checks have no token.
open_router = APIRouter(prefix="/api/v1", tags=["api"])


MIN_FREE_DISK_BYTES = 50_000_000  # below this (or 2 % of a small disk) the disk counts as full


def disk_problem(settings) -> str | None:
    """Why saves will fail for lack of disk, or None."""
    try:
        usage = shutil.disk_usage(settings.data_dir)
    except OSError:
        return None  # no data folder yet (a PostgreSQL-only set-up): nothing to say
    free = usage.free
    if free < min(MIN_FREE_DISK_BYTES, usage.total // 50):
        return f"the data folder's disk has {free // 1_000_000} MB free; saves will fail"
    return None


def health_data(session: Session, settings, search: SearchService | None = None) -> dict:
    """Health, never an error itself: with the database down it says so, and what still works
    (search answers from this process's index)."""
    state = read_state(settings.index_dir)
    damaged = search.damaged if search is not None else None
    problems = []
    try:
        mark = storage.feed_mark(session)
        entries: int | None = storage.count_entries(session)
    except Exception as error:
        problem = storage.database_problem(error)
        if problem is None:
            raise
        session.rollback()
        mark, entries = None, None
        problems.append(f"database: {problem} Search still answers from the local index.")
    disk = disk_problem(settings)
    if disk:
        problems.append(f"disk: {disk}")
    index = None
    if state is not None:
        built = datetime.fromisoformat(state.updated_at)
        behind = None
        if mark is not None:
            behind = max(0, mark.count - state.count) if state.count >= 0 else mark.count
        index = {
            "seq": state.seq,
            "built_at": utc_iso(datetime.fromisoformat(state.built_at)),
            "updated_at": utc_iso(built),
            "age_seconds": round((datetime.now(UTC) - built).total_seconds(), 1),
            # changes in the feed this process's index has not applied yet (None: unknown)
            "behind": behind,
            "healthy": damaged is None,
            "problem": damaged,
        }
    if damaged:
        problems.append(f"index: {damaged}")
    return {
        "status": "ok" if index is not None and not problems else "degraded",
        "problems": problems,
        "entries": entries,
        "change_seq": mark.seq if mark is not None else None,
        "index": index,
    }


@open_router.get("/health", summary="Liveness and freshness: entries, change sequence, index age")
def health(session: SessionDep, settings: SettingsDep, service: SearchDep) -> dict:
    return health_data(session, settings, service)


@router.get(
    "/overview",
    summary="What the home page shows: counts by kind and tag, recent entries",
    responses=errors(503),
)
def overview(session: SessionDep, service: SearchDep) -> Overview:
    return get_overview(session, service)


@router.get("/tags/{tag}", summary="The entries with one tag", responses=errors(404, 422, 503))
def tag(tag: str, service: SearchDep) -> TagPage:
    return get_tag_page(service, tag)


@router.get("/search", summary="Full-text search over the entries", responses=errors(422, 503))
async def search(
    request: Request,
    service: SearchDep,
    settings: SettingsDep,
    q: str = Query(
        "",
        description="Words, an error message or an identifier; empty lists every entry",
        max_length=2000,
        examples=["batches tracked", "torch.cuda.FloatTensor", "显存"],
    ),
    kind: str | None = Query(None, description="Only entries of this kind", examples=["error"]),
    tag: str | None = Query(
        None, description="Only entries with this tag", examples=["checkpoint"]
    ),
    page: int = Query(1, ge=1, le=10_000),
    limit: int | None = Query(None, ge=1, le=200),
    exact: bool = Query(
        False,
        description="Search the words as typed: no spelling correction (by default a query "
        "that finds nothing, or only some of its words, is answered with the corrected "
        "query's results and `corrected_from` holds what was typed)",
    ),
) -> dict:
    # Error text is matched as well as searched: its known and likely entries, best first.
    state = request.app.state

    def work() -> dict:
        return search_with_matches(
            service,
            q,
            engine=state.engine,
            matcher=state.matchers.current(),
            kind=kind,
            tag=tag,
            page=page,
            limit=limit or settings.search_page_size,
            correct=not exact,
        )

    # As many searches at once as there are cores: more threads only take turns at the GIL.
    return await anyio.to_thread.run_sync(work, limiter=state.search_limiter)


@router.get(
    "/entries/{entry_id}",
    summary="One entry with its rendered HTML and Markdown source",
    description="The `ETag` header carries the entry's revision. An archived entry (after "
    "`DELETE`) is 404 here; its history stays at `…/revisions`, and restoring a revision brings "
    "it back.",
    responses=errors(404, 422),
)
def entry(
    session: SessionDep,
    response: Response,
    entry_id: str = Path(description="The entry's id", examples=["view-non-contiguous"]),
) -> EntryDetails:
    details = _details(session, response, entry_id)
    if details.archived:
        raise NotFound(
            f"entry {entry_id!r} is archived; its revisions are at "
            f"/api/v1/entries/{entry_id}/revisions, and restoring one brings it back"
        )
    return details


def _details(session: Session, response: Response, entry_id: str) -> EntryDetails:
    details = get_entry_details(session, entry_id)
    if details is None:
        raise NotFound(f"no entry with id {entry_id!r}")
    response.headers["ETag"] = f'"{details.revision}"'
    return details


# ---- writing ---------------------------------------------------------------------------------


class EntryWrite(BaseModel):
    markdown: str
    message: str


class DraftIn(BaseModel):
    markdown: str
    entry_id: str | None = None  # the entry being edited; none for a new entry
    paste: str | None = None  # a traceback to try the draft's signatures on


class DraftOut(BaseModel):
    ok: bool
    id: str | None
    problems: list[ProblemOut]
    html: str
    tester: TesterResult | None


class WhoAmI(BaseModel):
    authenticated: bool
    kind: str
    name: str
    role: str


def _required_fields(model: type[BaseModel]) -> str:
    names = [f'"{name}"' for name, field in model.model_fields.items() if field.is_required()]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


async def read_json(request: Request, model: type[BaseModel]):
    """The JSON body as `model`, read after the caller is authorized, within the size limit."""
    body = await read_write_body(request, "body")
    if not body.strip():
        raise HTTPException(
            422, f"The body is empty; send a JSON object with {_required_fields(model)}."
        )
    try:
        payload = await decoded(len(body), json.loads, body)
    except ValueError:
        raise HTTPException(400, "The body is not valid JSON.") from None
    if not isinstance(payload, dict):
        kind = "null" if payload is None else type(payload).__name__
        raise HTTPException(
            422, f"The body must be a JSON object with {_required_fields(model)}, not {kind}."
        )
    try:
        return model.model_validate(payload)
    except ValidationError as exc:  # answered like FastAPI's own body errors
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


def _json_body(model: type[BaseModel], example: dict) -> dict:
    schema = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema, "example": example}},
        }
    }


_WRITE_EXAMPLE = {"markdown": "---\nid: my-entry\n...", "message": "Explain the 2.6 default"}


_ENTITY_TAG = re.compile(r'(W/)?"([^"]*)"')


@dataclass(frozen=True)
class IfMatch:
    """An `If-Match` header (RFC 9110 13.1.1): `*`, or the entity tags it lists.

    If-Match compares strongly, so only strong tags can match: a weak tag such as `W/"3"` only
    claims a revision equivalent to 3, and a write based on it could silently undo a change, so
    it never matches and the answer is 412. Our ETags are strong (`"3"`); send them as GET gave
    them.
    """

    header: str
    any: bool  # `*`: whatever revision is current
    revisions: frozenset[int]  # of the strong tags
    weak: frozenset[int]  # of the weak tags, to explain a 412

    def check(self, entry_id: str, current: int) -> None:
        """Nothing when the current revision matches; else PreconditionFailed (412)."""
        if self.any or current in self.revisions:
            return
        if current in self.weak:
            raise PreconditionFailed(
                entry_id,
                current,
                f'If-Match compares strongly (RFC 9110), so the weak W/"{current}" never '
                f'matches; send the ETag as GET gave it: "{current}". Nothing was saved.',
            )
        raise PreconditionFailed(
            entry_id,
            current,
            f"Entry {entry_id!r} is at revision {current}, and If-Match ({self.header}) does "
            "not name it: someone saved since you read it. Nothing was saved; GET it again "
            "and redo your edit on top.",
        )


class PreconditionFailed(EditConflict):
    """If-Match names none of the current revision: answered as an edit conflict (412)."""

    def __init__(self, entry_id: str, current: int, message: str) -> None:
        super().__init__(entry_id, current, current)
        self.args = (message,)


def if_match(request: Request) -> IfMatch:
    """The If-Match header of an edit: required (428), and a list of entity tags or `*` (400)."""
    header = " ".join(request.headers.getlist("if-match")).strip()
    if not header:
        raise HTTPException(
            428, "Send If-Match with the ETag of the revision you edited (from GET), or *."
        )
    if header == "*":
        return IfMatch(header, True, frozenset(), frozenset())
    tags = _ENTITY_TAG.findall(header)
    if not tags or _ENTITY_TAG.sub("", header).replace(",", "").strip():
        raise HTTPException(
            400, f'If-Match must be * or entity tags such as "3" or "2", "3"; not {header!r}.'
        )
    strong = frozenset(int(v) for weak, v in tags if not weak and v.isdigit() and len(v) < 10)
    weak = frozenset(int(v) for w, v in tags if w and v.isdigit() and len(v) < 10)
    return IfMatch(header, False, strong, weak)


@router.get("/me", summary="Who the request is authenticated as")
def whoami(request: Request) -> WhoAmI:
    principal = get_principal(request)
    return WhoAmI(
        authenticated=principal.authenticated,
        kind=principal.kind,
        name=principal.label if principal.authenticated else "",
        role=principal.role,
    )


@router.post(
    "/entries",
    status_code=201,
    summary="Create an entry from its Markdown file text",
    description="422 with `problems` (line, message) when the entry does not pass the checks; "
    "409 when the id exists. The `ETag` of the answer is the new revision.",
    openapi_extra=_json_body(EntryWrite, _WRITE_EXAMPLE),
    responses=errors(400, 403, 409, 413, 422, 503),
)
async def create_entry(
    request: Request, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    body = await read_json(request, EntryWrite)

    def write() -> EntryDetails:
        entry, _ = save_draft(
            session, markdown=body.markdown, message=body.message, actor=principal, source="api"
        )
        return _details(session, response, entry.id)

    details = await request.app.state.writes.run(write)
    response.headers["Location"] = site_path(request, f"/api/v1/entries/{details.id}")
    return details


def _current_revision(session: Session, entry_id: str) -> int:
    try:
        entry = storage.get_entry(session, entry_id)
        if entry is None:
            raise NotFound(f"There is no entry {entry_id!r}.")
        return entry.revision
    finally:
        # Back to the pool before the write waits for its turn: 50 saves queued behind
        # SQLite's one writer must not hold 50 connections while they wait.
        session.close()


@router.put(
    "/entries/{entry_id}",
    summary="Replace an entry's Markdown (a new revision)",
    description="`If-Match` must carry the ETag of the revision you edited (a list of them, "
    'such as `"2", "3"`, may name it among others): 412 with `current_revision` if someone '
    'saved since, 428 without it (`*` overwrites deliberately). Weak tags (`W/"3"`) never '
    "match: If-Match compares strongly (RFC 9110). 422 with `problems` when the entry does "
    "not pass the checks.",
    openapi_extra=_json_body(EntryWrite, _WRITE_EXAMPLE),
    responses=errors(400, 403, 404, 409, 412, 413, 422, 428, 503),
)
async def update_entry(
    entry_id: str,
    request: Request,
    response: Response,
    session: SessionDep,
    principal: Editor,
    condition: Annotated[IfMatch, Depends(if_match)],
) -> EntryDetails:
    # The precondition is judged before the body is read (RFC 9110 13.2.1), and once more by the
    # save itself, which refuses a revision that is no longer the latest when it writes.
    current = await run_in_threadpool(_current_revision, session, entry_id)
    condition.check(entry_id, current)
    base = None if condition.any else current
    body = await read_json(request, EntryWrite)

    def write() -> EntryDetails:
        save_draft(
            session,
            markdown=body.markdown,
            message=body.message,
            actor=principal,
            source="api",
            entry_id=entry_id,
            base_revision=base,
        )
        return _details(session, response, entry_id)

    return await request.app.state.writes.run(write)


@router.delete(
    "/entries/{entry_id}",
    summary="Archive an entry (its history is kept)",
    responses=errors(403, 404, 422, 503),
)
async def delete_entry(
    entry_id: str, request: Request, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    def write() -> EntryDetails:
        archive(session, entry_id=entry_id, actor=principal, source="api")
        return _details(session, response, entry_id)

    return await request.app.state.writes.run(write)


@router.get(
    "/entries/{entry_id}/revisions",
    summary="An entry's history, newest first",
    responses=errors(404, 422),
)
def revisions(entry_id: str, session: SessionDep) -> list[RevisionOut]:
    return revision_history(session, entry_id)


@router.get(
    "/entries/{entry_id}/revisions/{number}",
    summary="One revision with its Markdown",
    responses=errors(404, 422),
)
def revision(entry_id: str, number: RevisionNumber, session: SessionDep) -> RevisionDetail:
    return revision_detail(session, entry_id, number)


@router.post(
    "/entries/{entry_id}/revisions/{number}/restore",
    summary="Make an older revision the newest again (as a new revision)",
    # 409 and 422: the old text no longer passes the checks (its id or a signature is taken);
    # 412: someone saved between our read and our write.
    responses=errors(403, 404, 409, 412, 422, 503),
)
async def restore_revision(
    entry_id: str,
    number: RevisionNumber,
    request: Request,
    response: Response,
    session: SessionDep,
    principal: Editor,
) -> EntryDetails:
    def write() -> EntryDetails:
        restore(session, entry_id=entry_id, number=number, actor=principal, source="api")
        return _details(session, response, entry_id)

    return await request.app.state.writes.run(write)


@router.get("/changes", summary="Recent changes to the wiki, newest first", responses=errors(422))
def changes(
    session: SessionDep,
    limit: int = Query(50, ge=1, le=500),
    before: int | None = Query(
        None, ge=1, le=MAX_STORED_INT, description="Only changes older than this seq"
    ),
) -> list[ChangeOut]:
    return recent_changes(session, limit=limit, before=before)


@router.post(
    "/drafts/check",
    summary="Check a draft as the editor does: problems with lines, preview, signature tester",
    openapi_extra=_json_body(DraftIn, {"markdown": "---\nid: my-entry\n...", "paste": None}),
    responses=errors(400, 403, 413, 422),
)
async def check_draft_api(request: Request, session: SessionDep, _: Editor) -> DraftOut:
    body = await read_json(request, DraftIn)
    matchers = request.app.state.matchers

    def check() -> DraftOut:
        shared = matchers.current().signatures
        return draft_out(session, body.markdown, body.entry_id, body.paste, shared)

    return await run_in_threadpool(check)


def draft_out(
    session: Session,
    markdown: str,
    entry_id: str | None,
    paste: str | None,
    shared: SignatureMatcher | None = None,
) -> DraftOut:
    report = check_draft(session, markdown, editing=entry_id, shared=shared)
    doc = report.doc
    html = doc.rendered.html if doc.rendered is not None else render_body(doc.body).html
    return DraftOut(
        ok=not report.errors,
        id=doc.front.id if doc.front else None,
        problems=[
            ProblemOut(line=p.line, message=p.message, severity=p.severity) for p in report.problems
        ],
        html=html,
        tester=try_paste(session, doc, paste) if paste and paste.strip() else None,
    )


# ---- outcomes: did the fix work? ---------------------------------------------------------------


class OutcomeWrite(BaseModel):
    fingerprint: str = Field(
        pattern=FINGERPRINT.pattern, description="The answer's `fingerprint` for the error."
    )
    id: str = Field(description="The entry whose fix was tried.")
    worked: bool = Field(description="True when the fix made the error go away.")
    answer_token: str = Field(
        min_length=1,
        description="The answer's `answer_token`: proof that the server answered this "
        "fingerprint with this entry. Without it the request is invalid (422); with one for "
        "another entry or error, or older than PITFALLS_ANSWER_TOKEN_DAYS, it is refused (403).",
    )
    note: str = Field(
        "", max_length=MAX_NOTE_SENT, description="What was tried (kept to 500 characters)."
    )


def voter_of(request: Request) -> str:
    """Who reports: a user or token by name, anyone else by address (throttled per address)."""
    principal = get_principal(request)
    if principal.authenticated:
        return principal.label
    return "addr:" + (request.client.host if request.client else "unknown")


@router.post(
    "/outcomes",
    summary="Report whether an entry's fix worked for an error",
    description="Only for an entry that an answer of this server gave for this error: send "
    "the answer's `fingerprint` and `answer_token` with the entry's `id` (422 without the token; "
    "403 for a token of another entry or error, or an old one). One report per voter (user, "
    "token, or address) for each error and entry; a second replaces the first. A login or token "
    "may report PITFALLS_REPORTS_PER_HOUR times an hour, an address without one "
    "PITFALLS_ANONYMOUS_REPORTS_PER_HOUR (429 past it). The answer holds the entry's measured "
    "rates.",
    openapi_extra=_json_body(
        OutcomeWrite,
        {
            "fingerprint": "9f2c4e1a7b3d5f60",
            "id": "view-non-contiguous",
            "worked": True,
            "answer_token": "...",
            "note": "",
        },
    ),
    responses=errors(400, 403, 404, 413, 422, 429, 503),
)
async def report_outcome(request: Request) -> OutcomeOut:
    # A browser's session (a cookie) must send its CSRF token: another site's form could
    # otherwise report in a visitor's name or from their address. A JSON body without a
    # cookie cannot come from another site's page (it would need a CORS preflight).
    if SESSION_COOKIE in request.cookies:
        await check_csrf(request)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":  # a text/plain form of another site, say
        raise HTTPException(422, "Send the report as JSON (Content-Type: application/json).")
    body = await read_json(request, OutcomeWrite)
    voter = voter_of(request)
    try:
        return await request.app.state.writes.run(
            record_outcome,
            request.app.state.engine,
            fingerprint=body.fingerprint,
            id=body.id,
            worked=body.worked,
            note=body.note,
            voter=voter,
            answer_token=body.answer_token,
            rules=request.app.state.report_rules,
        )
    except OutcomeRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None


@router.get(
    "/inbox",
    summary="The errors nothing matched, clustered by fingerprint (editors; PITFALLS_INBOX)",
    responses=errors(403),
)
def inbox(session: SessionDep, _: Editor) -> list[ClusterOut]:
    return inbox_clusters(session)
