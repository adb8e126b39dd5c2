"""Writing entries over the API: create, update under If-Match, archive, restore a revision."""

import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field
from sqlmodel import Session

from app import storage
from app.catalog import NotFound
from app.entry_details import EntryDetails
from app.web import routers
from app.web.auth import Editor
from app.web.deps import RevisionNumber, SessionDep
from app.web.entries.read import entry_details_out
from app.web.http import errors, json_body, read_json, site_path
from app.web.runtime import runtime_of
from app.wiki import (
    EditConflict,
    MergedWith,
    archive,
    restore,
    save_draft,
)

api_router = routers.api_router()


class EntryWrite(BaseModel):
    markdown: str
    message: str


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
    single: int | None = None  # the revision, when the header is one strong tag and no more

    def base(self, entry_id: str, current: int) -> int | None:
        """The revision the edit started from: None for `*`, the current one when a tag names
        it, an older one when the header is that one strong tag (the save merges it with the
        newer ones); else PreconditionFailed (412)."""
        if self.any:
            return None
        if current in self.revisions:
            return current
        if self.single is not None and 1 <= self.single < current:
            return self.single
        self.check(entry_id, current)
        return current

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
    single = next(iter(strong)) if len(tags) == 1 and strong else None
    return IfMatch(header, False, strong, weak, single)


@api_router.post(
    "/entries",
    status_code=201,
    summary="Create an entry from its Markdown file text",
    description="422 with `problems` (line, message) when the entry does not pass the checks; "
    "409 when the id exists. The `ETag` of the answer is the new revision.",
    openapi_extra=json_body(EntryWrite, _WRITE_EXAMPLE),
    responses=errors(400, 403, 409, 413, 422, 503),
)
async def create_entry(
    request: Request, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    body = await read_json(request, EntryWrite)

    runtime = runtime_of(request)

    def write() -> EntryDetails:
        saved = save_draft(
            session,
            markdown=body.markdown,
            message=body.message,
            actor=principal,
            source="api",
            shared=runtime.signatures_for_save(session),
        )
        return entry_details_out(session, response, saved.entry.id)

    details = await runtime_of(request).writes.run(write)
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


class EntryUpdated(EntryDetails):
    merged: MergedWith | None = Field(
        None,
        description="Set when the edit started from an older revision and was merged with the "
        "newer ones: which, by whom, and a sentence to show.",
    )


@api_router.put(
    "/entries/{entry_id}",
    summary="Replace an entry's Markdown (a new revision)",
    description="`If-Match` must carry the ETag of the revision you edited (a list of them, "
    'such as `"2", "3"`, may name it among others), 428 without it (`*` overwrites '
    'deliberately). One tag of an older revision (`"2"` when the entry is at 4) merges your '
    "edit with what was saved since, as the editor does: `merged` in the answer says with "
    "what; 412 with `current_revision` when both changed the same or adjacent lines, or when "
    'a list of tags names none of the current revision. Weak tags (`W/"3"`) never match: '
    "If-Match compares strongly (RFC 9110). 422 with `problems` when the entry (or the merged "
    "text, then given as `merged_markdown`) does not pass the checks.",
    openapi_extra=json_body(EntryWrite, _WRITE_EXAMPLE),
    responses=errors(400, 403, 404, 409, 412, 413, 422, 428, 503),
)
async def update_entry(
    entry_id: str,
    request: Request,
    response: Response,
    session: SessionDep,
    principal: Editor,
    condition: Annotated[IfMatch, Depends(if_match)],
) -> EntryUpdated:
    # The precondition is judged before the body is read (RFC 9110 13.2.1), and once more by the
    # save itself, which merges with (or refuses) revisions saved since the base when it writes.
    current = await run_in_threadpool(_current_revision, session, entry_id)
    base = condition.base(entry_id, current)
    body = await read_json(request, EntryWrite)

    runtime = runtime_of(request)

    def write() -> EntryUpdated:
        saved = save_draft(
            session,
            markdown=body.markdown,
            message=body.message,
            actor=principal,
            source="api",
            entry_id=entry_id,
            base_revision=base,
            shared=runtime.signatures_for_save(session),
        )
        details = entry_details_out(session, response, entry_id)
        return EntryUpdated(**details.model_dump(), merged=saved.merged)

    return await runtime_of(request).writes.run(write)


@api_router.delete(
    "/entries/{entry_id}",
    summary="Archive an entry (its history is kept)",
    responses=errors(403, 404, 422, 503),
)
async def delete_entry(
    entry_id: str, request: Request, response: Response, session: SessionDep, principal: Editor
) -> EntryDetails:
    def write() -> EntryDetails:
        archive(session, entry_id=entry_id, actor=principal, source="api")
        return entry_details_out(session, response, entry_id)

    return await runtime_of(request).writes.run(write)


@api_router.post(
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
        return entry_details_out(session, response, entry_id)

    return await runtime_of(request).writes.run(write)
