"""What changed and what is missing: the change list (page, Atom, API) and the inbox of unknown
errors (page, API)."""

from urllib.parse import urlencode

from fastapi import Query, Request, Response
from fastapi.responses import HTMLResponse

from app.inbox import ClusterOut
from app.inbox import clusters as inbox_clusters
from app.revisions import ChangeOut, recent_changes
from app.web import routers
from app.web.auth import Editor
from app.web.deps import MAX_STORED_INT, SessionDep
from app.web.entries.editor import MAX_PREFILL_MESSAGE
from app.web.http import errors, public_base, render
from app.web.runtime import runtime_of

api_router = routers.api_router()

page_router = routers.page_router()


@api_router.get(
    "/changes", summary="Recent changes to the wiki, newest first", responses=errors(422)
)
def changes(
    session: SessionDep,
    limit: int = Query(50, ge=1, le=500),
    before: int | None = Query(
        None, ge=1, le=MAX_STORED_INT, description="Only changes older than this seq"
    ),
) -> list[ChangeOut]:
    return recent_changes(session, limit=limit, before=before)


@api_router.get(
    "/inbox",
    summary="The errors nothing matched, clustered by fingerprint (editors; PITFALLS_INBOX)",
    responses=errors(403),
)
def inbox(session: SessionDep, _: Editor) -> list[ClusterOut]:
    return inbox_clusters(session)


@page_router.get("/changes", response_class=HTMLResponse)
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


@page_router.get("/changes.atom")
def changes_feed(request: Request, session: SessionDep) -> Response:
    changes = recent_changes(session, limit=50)
    base = public_base(request)
    body = (
        runtime_of(request)
        .templates.get_template("changes.atom")
        .render(changes=changes, base=base)
    )
    return Response(body, media_type="application/atom+xml; charset=utf-8")


@page_router.get("/inbox", response_class=HTMLResponse)
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
        "enabled": runtime_of(request).settings.inbox,
    }
    return render(request, "inbox.html", context, alternate="/api/v1/inbox")
