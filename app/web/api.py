"""The JSON API under /api/v1: the same data the pages show, for bots and CI jobs."""

import json
from datetime import UTC, datetime

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app import storage
from app.catalog import NotFound, Overview, TagPage, get_overview, get_tag_page
from app.entry_details import EntryDetails, get_entry_details
from app.matching import SignatureMatcher
from app.rendering import render_body
from app.search import SearchService
from app.search_index import read_state
from app.web.auth import Editor, get_principal, read_access
from app.web.deps import SearchDep, SessionDep, SettingsDep
from app.web.limits import read_write_body
from app.wiki import (
    ChangeOut,
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

router = APIRouter(prefix="/api/v1", tags=["api"], dependencies=[Depends(read_access)])
# Health stays open: load balancers and uptime checks have no token.
open_router = APIRouter(prefix="/api/v1", tags=["api"])


def health_data(session: Session, settings, search: SearchService | None = None) -> dict:
    state = read_state(settings.index_dir)
    damaged = search.damaged if search is not None else None
    seq = storage.current_change_seq(session)
    index = None
    if state is not None:
        built = datetime.fromisoformat(state.updated_at)
        index = {
            "seq": state.seq,
            "built_at": state.built_at,
            "updated_at": state.updated_at,
            "age_seconds": round((datetime.now(UTC) - built).total_seconds(), 1),
            "behind": max(0, seq - state.seq),
            "healthy": damaged is None,
            "problem": damaged,
        }
    return {
        "status": "ok" if index is not None and damaged is None else "degraded",
        "entries": storage.count_entries(session),
        "change_seq": seq,
        "index": index,
    }


@open_router.get("/health", summary="Liveness and freshness: entries, change sequence, index age")
def health(session: SessionDep, settings: SettingsDep, service: SearchDep) -> dict:
    return health_data(session, settings, service)


@router.get("/overview", summary="What the home page shows: counts by kind and tag, recent entries")
def overview(session: SessionDep, service: SearchDep) -> Overview:
    return get_overview(session, service)


@router.get("/tags/{tag}", summary="The entries with one tag")
def tag(tag: str, service: SearchDep) -> TagPage:
    return get_tag_page(service, tag)


@router.get("/search", summary="Full-text search over the entries")
def search(
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
) -> dict:
    result = service.search(
        q, kind=kind, tag=tag, page=page, limit=limit or settings.search_page_size
    )
    return result.to_dict()


@router.get(
    "/entries/{entry_id}",
    summary="One entry with its rendered HTML and Markdown source",
    description="The `ETag` header carries the entry's revision.",
)
def entry(
    session: SessionDep,
    response: Response,
    entry_id: str = Path(description="The entry's id", examples=["view-non-contiguous"]),
) -> EntryDetails:
    return _details(session, response, entry_id)


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


class ProblemOut(BaseModel):
    line: int
    message: str
    severity: str


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


async def read_json(request: Request, model: type[BaseModel]):
    """The JSON body as `model`, read after the caller is authorized, within the size limit."""
    body = await read_write_body(request, "body")
    try:
        payload = json.loads(body or b"null")
    except ValueError:
        raise HTTPException(400, "The body is not valid JSON.") from None
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


def _if_match(request: Request) -> int | None:
    """The revision an edit is based on; None for `If-Match: *` (overwrite whatever is there)."""
    header = request.headers.get("if-match")
    if not header:
        raise HTTPException(
            428, "Send If-Match with the ETag of the revision you edited (from GET)."
        )
    if header.strip() == "*":
        return None
    value = header.strip().removeprefix("W/").strip('"')
    if not value.isdigit():
        raise HTTPException(400, f'If-Match must be a revision ETag such as "3", not {header!r}.')
    return int(value)


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
)
async def create_entry(
    request: Request, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    body = await read_json(request, EntryWrite)
    entry, _ = await run_in_threadpool(
        save_draft,
        session,
        markdown=body.markdown,
        message=body.message,
        actor=principal,
        source="api",
    )
    response.headers["Location"] = f"/api/v1/entries/{entry.id}"
    return _details(session, response, entry.id)


@router.put(
    "/entries/{entry_id}",
    summary="Replace an entry's Markdown (a new revision)",
    description="`If-Match` must carry the ETag of the revision you edited: 412 with "
    "`current_revision` if someone saved since, 428 without it (`*` overwrites deliberately), "
    "422 with `problems` when the entry does not pass the checks.",
    openapi_extra=_json_body(EntryWrite, _WRITE_EXAMPLE),
)
async def update_entry(
    entry_id: str, request: Request, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    base = _if_match(request)
    body = await read_json(request, EntryWrite)
    await run_in_threadpool(
        save_draft,
        session,
        markdown=body.markdown,
        message=body.message,
        actor=principal,
        source="api",
        entry_id=entry_id,
        base_revision=base,
    )
    return _details(session, response, entry_id)


@router.delete("/entries/{entry_id}", summary="Archive an entry (its history is kept)")
def delete_entry(
    entry_id: str, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    archive(session, entry_id=entry_id, actor=principal, source="api")
    return _details(session, response, entry_id)


@router.get("/entries/{entry_id}/revisions", summary="An entry's history, newest first")
def revisions(entry_id: str, session: SessionDep) -> list[RevisionOut]:
    return revision_history(session, entry_id)


@router.get("/entries/{entry_id}/revisions/{number}", summary="One revision with its Markdown")
def revision(entry_id: str, number: int, session: SessionDep) -> RevisionDetail:
    return revision_detail(session, entry_id, number)


@router.post(
    "/entries/{entry_id}/revisions/{number}/restore",
    summary="Make an older revision the newest again (as a new revision)",
)
def restore_revision(
    entry_id: str, number: int, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    restore(session, entry_id=entry_id, number=number, actor=principal, source="api")
    return _details(session, response, entry_id)


@router.get("/changes", summary="Recent changes to the wiki, newest first")
def changes(
    session: SessionDep,
    limit: int = Query(50, ge=1, le=500),
    before: int | None = Query(None, ge=1, description="Only changes older than this seq"),
) -> list[ChangeOut]:
    return recent_changes(session, limit=limit, before=before)


@router.post(
    "/drafts/check",
    summary="Check a draft as the editor does: problems with lines, preview, signature tester",
    openapi_extra=_json_body(DraftIn, {"markdown": "---\nid: my-entry\n...", "paste": None}),
)
async def check_draft_api(request: Request, session: SessionDep, _: Editor) -> DraftOut:
    body = await read_json(request, DraftIn)
    shared = request.app.state.matchers.current()
    return await run_in_threadpool(
        draft_out, session, body.markdown, body.entry_id, body.paste, shared
    )


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
