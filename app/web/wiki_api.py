"""The wiki's reading side as JSON: a diff between revisions, and what the editor opens with
(the entry's source and revision, or a new entry's draft). The twins of the diff and editor pages;
those pages call the same functions.
"""

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from sqlmodel import Session

from app import storage
from app.catalog import NotFound
from app.drafts import BLANK_MESSAGE, draft_markdown
from app.web.api import DraftOut, draft_out, errors
from app.web.auth import Editor, read_access
from app.web.deps import MAX_STORED_INT, SessionDep
from app.wiki import RevisionDiff, revision_diff

router = APIRouter(
    prefix="/api/v1", tags=["api"], dependencies=[Depends(read_access)], responses=errors(401)
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
    shared = request.app.state.matchers.current().signatures
    return EditorState(
        entry_id=entry_id,
        base_revision=base_revision,
        markdown=markdown,
        draft=draft_out(session, markdown, entry_id, paste or None, shared),
    )


@router.get(
    "/entries/{entry_id}/edit",
    summary="What the editor opens with: the entry's Markdown, revision and checks (editors)",
    responses=errors(403, 404, 422),
)
def edit_entry(entry_id: str, request: Request, session: SessionDep, _: Editor) -> EditorState:
    markdown, revision = edit_source(session, entry_id)
    return editor_state(
        request, session, markdown=markdown, entry_id=entry_id, base_revision=revision
    )


@router.get(
    "/drafts/new",
    summary="A new entry's draft, blank or from an error's type and message (editors)",
    responses=errors(403, 422),
)
def new_entry(
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


@router.get(
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
