"""Webhooks, for admins: the page that registers and removes them, the delivery log, and
their API twins. Every route asks for an admin; a refusal is a 403 with a sentence."""

from typing import Annotated, Literal

from fastapi import Path, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from sqlmodel import Session

from app.accounts import Principal
from app.models import WEBHOOK_EVENTS, WEBHOOK_FORMATS
from app.web import routers
from app.web.auth import Admin, form_fields
from app.web.deps import MAX_STORED_INT, SessionDep
from app.web.http import errors, read_json, render, see_other
from app.web.runtime import runtime_of
from app.webhooks import (
    DEFAULT_THRESHOLD,
    MAX_SECRET_LENGTH,
    MAX_THRESHOLD,
    MAX_URL_LENGTH,
    MIN_SECRET_LENGTH,
    DeliveryOut,
    HookOut,
    WebhookError,
    add_hook,
    generate_secret,
    list_hooks,
    recent_deliveries,
    remove_hook,
)

api_router = routers.api_router("webhooks")
page_router = routers.page_router()

LOG_LIMIT = 100
HookId = Annotated[int, Path(ge=1, le=MAX_STORED_INT, description="A webhook's number.")]


EventName = Literal[
    "entry.created",
    "entry.changed",
    "entry.archived",
    "inbox.cluster_new",
    "inbox.cluster_threshold",
]


class HookIn(BaseModel):
    url: str = Field(
        max_length=MAX_URL_LENGTH, description="Where to POST: an http:// or https:// address."
    )
    events: list[EventName] = Field(min_length=1, description="The events to send.")
    body_format: Literal["json", "slack"] = Field(
        "json", description='json (our event JSON) or slack ({"text": ...}).'
    )
    secret: str | None = Field(
        None,
        min_length=MIN_SECRET_LENGTH,
        max_length=MAX_SECRET_LENGTH,
        description="Signs each delivery; never shown again after this request's answer.",
    )
    generate_secret: bool = Field(False, description="Have a secret made (returned this once).")
    threshold: int = Field(
        DEFAULT_THRESHOLD,
        ge=1,
        le=MAX_THRESHOLD,
        description="The count at which inbox.cluster_threshold fires.",
    )


class HookCreated(HookOut):
    secret: str | None = Field(description="The secret, shown this once; null when unsigned.")


def _create(session: Session, body: HookIn, principal: Principal) -> HookCreated:
    secret = generate_secret() if body.generate_secret else body.secret
    hook = add_hook(
        session,
        url=body.url,
        events=body.events,
        body_format=body.body_format,
        secret=secret,
        threshold=body.threshold,
        actor=principal,
    )
    session.commit()
    return HookCreated(**HookOut.of(hook).model_dump(), secret=hook.secret)


@api_router.get(
    "/webhooks", summary="The webhooks, with their secrets masked (admins)", responses=errors(403)
)
def webhooks(session: SessionDep, _: Admin) -> list[HookOut]:
    return [HookOut.of(h) for h in list_hooks(session)]


@api_router.post(
    "/webhooks",
    status_code=201,
    summary="Register a webhook (admins); its secret is in this answer only",
    responses=errors(400, 403, 413, 422),
)
async def webhook_create(request: Request, session: SessionDep, principal: Admin) -> HookCreated:
    body = await read_json(request, HookIn)
    return await runtime_of(request).writes.run(_create, session, body, principal)


@api_router.delete(
    "/webhooks/{hook_id:int}",  # digits only: /webhooks/deliveries is another resource
    status_code=204,
    summary="Remove a webhook and its deliveries (admins)",
    responses=errors(403, 404, 422),
)
async def webhook_delete(
    hook_id: HookId, request: Request, session: SessionDep, principal: Admin
) -> None:
    def write() -> None:
        remove_hook(session, hook_id=hook_id, actor=principal)
        session.commit()

    await runtime_of(request).writes.run(write)


@api_router.get(
    "/webhooks/deliveries",
    summary="The newest webhook deliveries: event, address, answer, attempts, next try (admins)",
    responses=errors(403, 422),
)
def webhook_deliveries(
    session: SessionDep, _: Admin, limit: int = Query(LOG_LIMIT, ge=1, le=1000)
) -> list[DeliveryOut]:
    return recent_deliveries(session, limit=limit)


# ---- pages -----------------------------------------------------------------------------------


def _page(
    request: Request,
    session: Session,
    *,
    error: str | None = None,
    created: HookCreated | None = None,
    form: dict[str, str] | None = None,
):
    context = {
        "hooks": [HookOut.of(h) for h in list_hooks(session)],
        "events": WEBHOOK_EVENTS,
        "formats": WEBHOOK_FORMATS,
        "error": error,
        "created": created,  # the new webhook, with its secret shown this once
        "form": form or {},
    }
    return render(request, "webhooks.html", context, status_code=422 if error else 200)


@page_router.get("/admin/webhooks", response_class=HTMLResponse)
def webhooks_page(request: Request, session: SessionDep, _: Admin):
    return _page(request, session)


@page_router.post("/admin/webhooks", response_class=HTMLResponse)
async def webhooks_add(request: Request, session: SessionDep, principal: Admin):
    form = await form_fields(request)
    threshold = form.get("threshold", "").strip() or "10"

    def write():
        try:
            # Unchecked here: add_hook checks every field, and says what is wrong in a sentence.
            body = HookIn.model_construct(
                url=form.get("url", ""),
                events=[e for e in WEBHOOK_EVENTS if form.get(f"event:{e}")],
                body_format=form.get("body_format", "json"),
                secret=form.get("secret") or None,
                generate_secret=bool(form.get("generate_secret")),
                threshold=int(threshold) if threshold.isdigit() else 0,
            )
            created = _create(session, body, principal)
        except WebhookError as exc:
            session.rollback()
            kept = {k: v for k, v in form.items() if k not in ("secret", "csrf_token")}
            return _page(request, session, error=str(exc), form=kept)
        return _page(request, session, created=created)

    return await runtime_of(request).writes.run(write)


@page_router.post("/admin/webhooks/{hook_id}/remove")
async def webhooks_remove(hook_id: HookId, request: Request, session: SessionDep, principal: Admin):
    def write() -> None:
        remove_hook(session, hook_id=hook_id, actor=principal)
        session.commit()

    await runtime_of(request).writes.run(write)
    return see_other(request, "/admin/webhooks")


@page_router.get("/admin/webhooks/deliveries", response_class=HTMLResponse)
def deliveries_page(request: Request, session: SessionDep, _: Admin):
    context = {"deliveries": recent_deliveries(session, limit=LOG_LIMIT), "limit": LOG_LIMIT}
    return render(request, "webhook_deliveries.html", context)
