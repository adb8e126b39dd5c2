"""The wiki in the browser: the editor (new and edit), archive, history, diffs, restore, and the
recent-changes page with its JSON twin and Atom feed.

Every write asks for the editor role and the session's CSRF token (`Editor`). A refused save
renders the editor again with the text as typed: nothing a person wrote is ever dropped.
"""

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app import storage
from app.catalog import NotFound
from app.diffs import side_by_side
from app.inbox import clusters as inbox_clusters
from app.web.auth import Editor, form_fields, read_access
from app.web.deps import MAX_STORED_INT, RevisionNumber, SessionDep
from app.web.pages import render
from app.web.paths import public_base, see_other
from app.web.wiki_api import MAX_PREFILL_MESSAGE, edit_source, editor_state, new_entry_source
from app.wiki import (
    EditConflict,
    SaveRefused,
    archive,
    diff_html,
    recent_changes,
    restore,
    revision_detail,
    revision_history,
    save_draft,
)

router = APIRouter(include_in_schema=False, dependencies=[Depends(read_access)])


def _editor(
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


@router.get("/entries/new", response_class=HTMLResponse)
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
    return _editor(
        request, session, markdown=markdown, entry_id=None, base_revision=None, paste=paste or ""
    )


@router.get("/entries/{entry_id}/edit", response_class=HTMLResponse)
def edit_entry(entry_id: str, request: Request, session: SessionDep, _: Editor):
    markdown, revision = edit_source(session, entry_id)
    return _editor(request, session, markdown=markdown, entry_id=entry_id, base_revision=revision)


def _base(form: dict[str, str]) -> int | None:
    value = form.get("base_revision", "")
    return int(value) if value.isdigit() else None


@router.post("/entries/check", response_class=HTMLResponse)
async def check_entry(request: Request, session: SessionDep, _: Editor):
    """The editor's Check button without JavaScript: problems, preview and tester, nothing saved."""
    form = await form_fields(request)
    return await run_in_threadpool(
        _editor,
        request,
        session,
        markdown=form.get("markdown", ""),
        entry_id=form.get("entry_id") or None,
        base_revision=_base(form),
        message=form.get("message", ""),
        paste=form.get("paste", ""),
    )


@router.post("/entries/new", response_class=HTMLResponse)
async def create_entry(request: Request, session: SessionDep, principal: Editor):
    form = await form_fields(request)
    markdown, message = form.get("markdown", ""), form.get("message", "")
    try:
        entry, _ = await request.app.state.writes.run(
            save_draft, session, markdown=markdown, message=message, actor=principal, source="web"
        )
    except SaveRefused as exc:
        return await run_in_threadpool(
            _editor,
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
    return see_other(request, f"/entries/{entry.id}")


@router.post("/entries/{entry_id}/edit", response_class=HTMLResponse)
async def save_entry(entry_id: str, request: Request, session: SessionDep, principal: Editor):
    form = await form_fields(request)
    markdown, message = form.get("markdown", ""), form.get("message", "")
    base = _base(form)
    keep = {
        "markdown": markdown,
        "entry_id": entry_id,
        "message": message,
        "paste": form.get("paste", ""),
    }
    try:
        await request.app.state.writes.run(
            save_draft,
            session,
            markdown=markdown,
            message=message,
            actor=principal,
            source="web",
            entry_id=entry_id,
            base_revision=base,
        )
    except SaveRefused as exc:
        return await run_in_threadpool(
            _editor,
            request,
            session,
            **keep,
            base_revision=base,
            refused=exc,
            status_code=exc.status,
        )
    except EditConflict as exc:
        return await run_in_threadpool(_conflicting, request, session, keep, exc)
    return see_other(request, f"/entries/{entry_id}")


def _conflicting(request: Request, session: Session, keep: dict, exc: EditConflict):
    """The editor again with the other person's change beside the text the save kept."""
    return _editor(
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


@router.get("/entries/{entry_id}/archive", response_class=HTMLResponse)
def confirm_archive(entry_id: str, request: Request, session: SessionDep, _: Editor):
    """Archiving asks first, and asks why: a form that works without JavaScript."""
    return _archive_form(request, session, entry_id)


@router.post("/entries/{entry_id}/archive", response_class=HTMLResponse)
async def archive_entry(request: Request, entry_id: str, session: SessionDep, principal: Editor):
    reason = (await form_fields(request)).get("reason", "")
    try:
        await request.app.state.writes.run(
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


@router.post("/entries/{entry_id}/revisions/{number}/restore", response_class=HTMLResponse)
async def restore_revision(
    entry_id: str, number: RevisionNumber, request: Request, session: SessionDep, principal: Editor
):
    try:
        await request.app.state.writes.run(
            restore, session, entry_id=entry_id, number=number, actor=principal, source="web"
        )
    except SaveRefused as exc:
        return await run_in_threadpool(_refused_restore, request, session, entry_id, number, exc)
    return see_other(request, f"/entries/{entry_id}")


def _refused_restore(
    request: Request, session: Session, entry_id: str, number: int, refused: SaveRefused
):
    """The editor over the old revision's text, with why restoring it was refused."""
    old = revision_detail(session, entry_id, number)
    current = storage.get_entry(session, entry_id)
    return _editor(
        request,
        session,
        markdown=old.markdown,
        entry_id=entry_id,
        base_revision=current.revision if current else None,
        message=f"Restore revision {number}",
        refused=refused,
        status_code=refused.status,
    )


# ---- reading the history ---------------------------------------------------------------------


@router.get("/entries/{entry_id}/history", response_class=HTMLResponse)
def history(entry_id: str, request: Request, session: SessionDep):
    revisions = revision_history(session, entry_id)
    entry = storage.get_entry(session, entry_id)
    return render(
        request,
        "history.html",
        {"entry": entry, "revisions": revisions},
        f"/api/v1/entries/{entry_id}/revisions",
    )


@router.get("/entries/{entry_id}/revisions/{number}", response_class=HTMLResponse)
def revision_page(entry_id: str, number: RevisionNumber, request: Request, session: SessionDep):
    revision = revision_detail(session, entry_id, number)
    entry = storage.get_entry(session, entry_id)
    return render(
        request,
        "revision.html",
        {"entry": entry, "revision": revision},
        f"/api/v1/entries/{entry_id}/revisions/{number}",
    )


@router.get("/entries/{entry_id}/diff", response_class=HTMLResponse)
def diff_page(
    entry_id: str,
    request: Request,
    session: SessionDep,
    old: int = Query(..., alias="from", ge=1, le=MAX_STORED_INT),
    new: int = Query(..., alias="to", ge=1, le=MAX_STORED_INT),
):
    before = revision_detail(session, entry_id, old)
    after = revision_detail(session, entry_id, new)
    html = diff_html(before.markdown, after.markdown, f"revision {old}", f"revision {new}")
    entry = storage.get_entry(session, entry_id)
    rows = side_by_side(before.markdown, after.markdown)
    context = {"entry": entry, "before": before, "after": after, "diff": html, "rows": rows}
    return render(request, "diff.html", context)


@router.get("/changes", response_class=HTMLResponse)
def changes_page(
    request: Request, session: SessionDep, before: int | None = Query(None, ge=1, le=MAX_STORED_INT)
):
    changes = recent_changes(session, limit=50, before=before)
    older = changes[-1].seq if len(changes) == 50 else None
    return render(
        request,
        "changes.html",
        {"changes": changes, "older": older},
        "/api/v1/changes",
    )


@router.get("/changes.atom")
def changes_feed(request: Request, session: SessionDep) -> Response:
    changes = recent_changes(session, limit=50)
    base = public_base(request)
    body = request.app.state.templates.get_template("changes.atom").render(
        changes=changes, base=base
    )
    return Response(body, media_type="application/atom+xml; charset=utf-8")


@router.get("/inbox", response_class=HTMLResponse)
def inbox_page(request: Request, session: SessionDep, _: Editor):
    """What nothing matched, clustered (PITFALLS_INBOX): the errors worth an entry next."""
    found = inbox_clusters(session)
    # The editor's prefill for each: the first example, and all of them in the tester.
    prefills = [
        urlencode(
            {
                "type": c.exception,
                "message": c.examples[0][:MAX_PREFILL_MESSAGE] if c.examples else "",
                "paste": "\n\n".join(c.examples)[:MAX_PREFILL_MESSAGE],
            }
        )
        for c in found
    ]
    context = {
        "clusters": list(zip(found, prefills, strict=True)),
        "enabled": request.app.state.settings.inbox,
    }
    return render(request, "inbox.html", context, alternate="/api/v1/inbox")
