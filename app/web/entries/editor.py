"""The wiki editor: new and edit pages, the draft check beside them (page and API), archiving."""

from functools import partial
from typing import Any

from fastapi import Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from sqlmodel import Session

from app import storage
from app.catalog import NotFound
from app.drafts import BLANK_MESSAGE, draft_markdown
from app.matching import SignatureMatcher
from app.rendering import render_body
from app.revisions import diff_html, revision_detail
from app.web import routers
from app.web.auth import Editor, form_fields
from app.web.deps import SessionDep
from app.web.entries.read import UNCHANGED
from app.web.http import ProblemOut, errors, json_body, read_json, render, see_other
from app.web.runtime import runtime_of
from app.wiki import (
    EditConflict,
    MergeRefused,
    SaveRefused,
    TesterResult,
    archive,
    check_draft,
    save_draft,
    try_paste,
)

api_router = routers.api_router()

page_router = routers.page_router()


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


@api_router.post(
    "/drafts/check",
    summary="Check a draft as the editor does: problems with lines, preview, signature tester",
    openapi_extra=json_body(DraftIn, {"markdown": "---\nid: my-entry\n...", "paste": None}),
    responses=errors(400, 403, 413, 422),
)
async def check_draft_api(request: Request, session: SessionDep, _: Editor) -> DraftOut:
    body = await read_json(request, DraftIn)
    matchers = runtime_of(request).matchers

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


MAX_PREFILL_MESSAGE = 2000


BLANK_ENTRY = draft_markdown("RuntimeError", BLANK_MESSAGE)


class EditorState(BaseModel):
    entry_id: str | None = Field(description="The entry being edited; null for a new one.")
    base_revision: int | None = Field(
        description="The revision the text starts from: send it back (If-Match) when saving."
    )
    markdown: str = Field(description="The entry's file text, front-matter and body.")
    draft: DraftOut = Field(description="What the editor shows beside it: problems, preview.")


def edit_source(session: Session, entry_id: str) -> tuple[str, int]:
    """The entry's current Markdown and revision, to edit; NotFound when there is none."""
    entry = storage.get_entry(session, entry_id)
    if entry is None:
        raise NotFound(f"There is no entry {entry_id!r} to edit.")
    return storage.current_markdown(session, entry=entry), entry.revision


def new_entry_source(session: Session, exception: str | None, message: str | None) -> str:
    """A new entry's text: blank, or drafted from an error's type and message."""
    if message is None and exception is None:
        return BLANK_ENTRY
    taken = {e.id for e in storage.list_entries(session, include_archived=True)}
    return draft_markdown(exception, message or "", taken)


def editor_state(
    request: Request,
    session: Session,
    *,
    markdown: str,
    entry_id: str | None,
    base_revision: int | None,
    paste: str = "",
) -> EditorState:
    shared = runtime_of(request).matchers.current().signatures
    return EditorState(
        entry_id=entry_id,
        base_revision=base_revision,
        markdown=markdown,
        draft=draft_out(session, markdown, entry_id, paste or None, shared),
    )


@api_router.get(
    "/entries/{entry_id}/edit",
    name="edit_entry",
    summary="What the editor opens with: the entry's Markdown, revision and checks (editors)",
    responses=errors(403, 404, 422),
)
def edit_entry_api(entry_id: str, request: Request, session: SessionDep, _: Editor) -> EditorState:
    markdown, revision = edit_source(session, entry_id)
    return editor_state(
        request, session, markdown=markdown, entry_id=entry_id, base_revision=revision
    )


@api_router.get(
    "/drafts/new",
    name="new_entry",
    summary="A new entry's draft, blank or from an error's type and message (editors)",
    responses=errors(403, 422),
)
def new_entry_api(
    request: Request,
    session: SessionDep,
    _: Editor,
    exception: str | None = Query(None, alias="type", max_length=200),
    message: str | None = Query(None, max_length=MAX_PREFILL_MESSAGE),
    paste: str | None = Query(None, max_length=MAX_PREFILL_MESSAGE),
) -> EditorState:
    markdown = new_entry_source(session, exception, message)
    return editor_state(
        request, session, markdown=markdown, entry_id=None, base_revision=None, paste=paste or ""
    )


def editor_page(
    request: Request,
    session: Session,
    *,
    markdown: str,
    entry_id: str | None,
    base_revision: int | None,
    message: str = "",
    paste: str = "",
    refused: SaveRefused | None = None,
    conflict: dict | None = None,
    status_code: int = 200,
):
    state = editor_state(
        request,
        session,
        markdown=markdown,
        entry_id=entry_id,
        base_revision=base_revision,
        paste=paste,
    )
    context = {
        "markdown": state.markdown,
        "entry_id": state.entry_id,
        "base_revision": state.base_revision,
        "message": message,
        "paste": paste,
        "draft": state.draft,
        "refused": str(refused) if refused else None,
        "conflict": conflict,
    }
    return render(request, "editor.html", context, status_code=status_code)


@page_router.get("/entries/new", response_class=HTMLResponse)
def new_entry(
    request: Request,
    session: SessionDep,
    _: Editor,
    exception: str | None = Query(None, alias="type", max_length=200),
    message: str | None = Query(None, max_length=MAX_PREFILL_MESSAGE),
    paste: str | None = Query(None, max_length=MAX_PREFILL_MESSAGE),
):
    """The editor; prefilled from an error (`?type=RuntimeError&message=...`) when given one,
    with the pasted traceback (`&paste=...`) in its signature tester."""
    markdown = new_entry_source(session, exception, message)
    return editor_page(
        request, session, markdown=markdown, entry_id=None, base_revision=None, paste=paste or ""
    )


@page_router.get("/entries/{entry_id}/edit", response_class=HTMLResponse)
def edit_entry(entry_id: str, request: Request, session: SessionDep, _: Editor):
    markdown, revision = edit_source(session, entry_id)
    return editor_page(
        request, session, markdown=markdown, entry_id=entry_id, base_revision=revision
    )


def _base(form: dict[str, str]) -> int | None:
    value = form.get("base_revision", "")
    return int(value) if value.isdigit() else None


@page_router.post("/entries/check", response_class=HTMLResponse)
async def check_entry(request: Request, session: SessionDep, _: Editor):
    """The editor's Check button without JavaScript: problems, preview and tester, nothing saved."""
    form = await form_fields(request)
    return await run_in_threadpool(
        editor_page,
        request,
        session,
        markdown=form.get("markdown", ""),
        entry_id=form.get("entry_id") or None,
        base_revision=_base(form),
        message=form.get("message", ""),
        paste=form.get("paste", ""),
    )


@page_router.post("/entries/new", response_class=HTMLResponse)
async def create_entry(request: Request, session: SessionDep, principal: Editor):
    form = await form_fields(request)
    markdown, message = form.get("markdown", ""), form.get("message", "")
    try:
        runtime = runtime_of(request)
        saved = await runtime.writes.run(
            lambda: save_draft(
                session,
                markdown=markdown,
                message=message,
                actor=principal,
                source="web",
                shared=runtime.signatures_for_save(session),
            )
        )
    except SaveRefused as exc:
        return await run_in_threadpool(
            editor_page,
            request,
            session,
            markdown=markdown,
            entry_id=None,
            base_revision=None,
            message=message,
            paste=form.get("paste", ""),
            refused=exc,
            status_code=exc.status,
        )
    return see_other(request, saved_path(saved.entry.id, saved.entry.revision, "created"))


def saved_path(entry_id: str, revision: int, action: str) -> str:
    """The entry's page after a save, which then says "Saved" (the `saved` query parameter)."""
    saved = UNCHANGED if action == "unchanged" else str(revision)
    return f"/entries/{entry_id}?saved={saved}"


@page_router.post("/entries/{entry_id}/edit", response_class=HTMLResponse)
async def save_entry(entry_id: str, request: Request, session: SessionDep, principal: Editor):
    form = await form_fields(request)
    markdown, message = form.get("markdown", ""), form.get("message", "")
    base = _base(form)
    keep: dict[str, Any] = {  # what the refused form shows again
        "markdown": markdown,
        "entry_id": entry_id,
        "message": message,
        "paste": form.get("paste", ""),
    }
    try:
        runtime = runtime_of(request)
        saved = await runtime.writes.run(
            lambda: save_draft(
                session,
                markdown=markdown,
                message=message,
                actor=principal,
                source="web",
                entry_id=entry_id,
                base_revision=base,
                shared=runtime.signatures_for_save(session),
            )
        )
    except SaveRefused as exc:
        if isinstance(exc, MergeRefused):
            # The problems' lines are the merged text's: show that, on top of the latest.
            keep["markdown"], base = exc.markdown, exc.merge.revision
        page = partial(
            editor_page,
            request,
            session,
            **keep,
            base_revision=base,
            refused=exc,
            status_code=exc.status,
        )
        return await run_in_threadpool(page)
    except EditConflict as exc:
        return await run_in_threadpool(_conflicting, request, session, keep, exc)
    if saved.merged is not None:
        merged = saved.merged
        query = f"merged={merged.revision}&from={merged.base_revision}"
        return see_other(request, f"/entries/{entry_id}?{query}")
    return see_other(request, saved_path(saved.entry.id, saved.entry.revision, saved.action))


def _conflicting(request: Request, session: Session, keep: dict, exc: EditConflict):
    """The editor again with the other person's change beside the text the save kept."""
    return editor_page(
        request,
        session,
        **keep,
        base_revision=exc.current,  # saving again means: I have merged their change
        conflict=_conflict(session, exc, keep["markdown"]),
        status_code=409,
    )


def _conflict(session: Session, exc: EditConflict, mine: str) -> dict:
    """What the other person changed (base -> latest), and how your text differs from latest."""
    base = revision_detail(session, exc.entry_id, exc.base) if exc.base >= 1 else None
    latest = revision_detail(session, exc.entry_id, exc.current)
    theirs = diff_html(
        base.markdown if base else "",
        latest.markdown,
        f"revision {exc.base} (yours started here)",
        f"revision {exc.current} by {latest.author}",
    )
    yours = diff_html(latest.markdown, mine, f"revision {exc.current}", "your text")
    return {"message": str(exc), "latest": latest, "theirs": theirs, "yours": yours}


def _archive_form(
    request: Request,
    session: Session,
    entry_id: str,
    *,
    reason: str = "",
    refused: str | None = None,
    status_code: int = 200,
):
    entry = storage.get_entry(session, entry_id)
    if entry is None:
        raise NotFound(f"There is no entry {entry_id!r} to archive.")
    context = {"entry": entry, "reason": reason, "refused": refused}
    return render(request, "archive.html", context, status_code=status_code)


@page_router.get("/entries/{entry_id}/archive", response_class=HTMLResponse)
def confirm_archive(entry_id: str, request: Request, session: SessionDep, _: Editor):
    """Archiving asks first, and asks why: a form that works without JavaScript."""
    return _archive_form(request, session, entry_id)


@page_router.post("/entries/{entry_id}/archive", response_class=HTMLResponse)
async def archive_entry(request: Request, entry_id: str, session: SessionDep, principal: Editor):
    reason = (await form_fields(request)).get("reason", "")
    try:
        await runtime_of(request).writes.run(
            archive, session, entry_id=entry_id, actor=principal, source="web", reason=reason
        )
    except SaveRefused as exc:
        refused = f"Say why the entry is archived: {exc}" if not reason.strip() else str(exc)
        return await run_in_threadpool(
            _archive_form,
            request,
            session,
            entry_id,
            reason=reason,
            refused=refused,
            status_code=exc.status,
        )
    return see_other(request, f"/entries/{entry_id}")
