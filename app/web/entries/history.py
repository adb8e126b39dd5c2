"""An entry's revisions: the list, one revision, the diff of two, and restoring one from a page."""

from fastapi import Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from sqlmodel import Session

from app import storage
from app.diffs import side_by_side
from app.revisions import (
    RevisionDetail,
    RevisionDiff,
    RevisionOut,
    diff_html,
    revision_detail,
    revision_diff,
    revision_history,
)
from app.web import routers
from app.web.auth import Editor
from app.web.deps import MAX_STORED_INT, RevisionNumber, SessionDep
from app.web.entries.editor import editor_page
from app.web.http import errors, render, see_other
from app.web.runtime import runtime_of
from app.wiki import SaveRefused, restore

api_router = routers.api_router()

page_router = routers.page_router()


@api_router.get(
    "/entries/{entry_id}/revisions",
    summary="An entry's history, newest first",
    responses=errors(404, 422),
)
def revisions(entry_id: str, session: SessionDep) -> list[RevisionOut]:
    return revision_history(session, entry_id)


@api_router.get(
    "/entries/{entry_id}/revisions/{number}",
    summary="One revision with its Markdown",
    responses=errors(404, 422),
)
def revision(entry_id: str, number: RevisionNumber, session: SessionDep) -> RevisionDetail:
    return revision_detail(session, entry_id, number)


@api_router.get(
    "/entries/{entry_id}/diff",
    summary="The difference between two revisions of an entry",
    responses=errors(404, 422),
)
def diff(
    entry_id: str,
    session: SessionDep,
    old: int = Query(..., alias="from", ge=1, le=MAX_STORED_INT),
    new: int = Query(..., alias="to", ge=1, le=MAX_STORED_INT),
) -> RevisionDiff:
    return revision_diff(session, entry_id, old, new)


@page_router.post("/entries/{entry_id}/revisions/{number}/restore", response_class=HTMLResponse)
async def restore_revision(
    entry_id: str, number: RevisionNumber, request: Request, session: SessionDep, principal: Editor
):
    try:
        await runtime_of(request).writes.run(
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
    return editor_page(
        request,
        session,
        markdown=old.markdown,
        entry_id=entry_id,
        base_revision=current.revision if current else None,
        message=f"Restore revision {number}",
        refused=refused,
        status_code=refused.status,
    )


@page_router.get("/entries/{entry_id}/history", response_class=HTMLResponse)
def history(entry_id: str, request: Request, session: SessionDep):
    revisions = revision_history(session, entry_id)
    entry = storage.get_entry(session, entry_id)
    return render(
        request,
        "history.html",
        {"entry": entry, "revisions": revisions},
        f"/api/v1/entries/{entry_id}/revisions",
    )


@page_router.get("/entries/{entry_id}/revisions/{number}", response_class=HTMLResponse)
def revision_page(entry_id: str, number: RevisionNumber, request: Request, session: SessionDep):
    revision = revision_detail(session, entry_id, number)
    entry = storage.get_entry(session, entry_id)
    return render(
        request,
        "revision.html",
        {"entry": entry, "revision": revision},
        f"/api/v1/entries/{entry_id}/revisions/{number}",
    )


@page_router.get("/entries/{entry_id}/diff", response_class=HTMLResponse)
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
