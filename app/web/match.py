"""Paste a traceback: the /match page and its JSON twin, POST /api/v1/match."""

import json

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from app import storage
from app.answers import Answer, answer_paste
from app.entry_details import entry_url
from app.inbox import record_unknown
from app.outcomes import FINGERPRINT, MAX_NOTE_SENT, OutcomeOut, record_outcome
from app.tracebacks import parse_traceback
from app.tracebacks.frames import folded_from_answer, where
from app.web import routers
from app.web.auth import SESSION_COOKIE, check_csrf, form_fields, get_principal, read_access
from app.web.deps import SettingsDep
from app.web.http import (
    BODY_OVERHEAD_BYTES,
    PASTE_TOO_LARGE,
    decoded,
    errors,
    form_fields_of,
    json_body,
    read_json,
    read_limited_body,
    render,
    see_other,
    site_path,
)
from app.web.middleware.caching import AnswerCache, KeptAnswer, current_mark
from app.web.offload import run_within_budget
from app.web.runtime import runtime_of

router = APIRouter(dependencies=[Depends(read_access)])

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["text"],
                    "properties": {"text": {"type": "string", "description": "The paste."}},
                },
                "example": {"text": "RuntimeError: view size is not compatible with input ..."},
            },
            "text/plain": {"schema": {"type": "string", "minLength": 1}},
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "required": ["text"],
                    # Not empty, and not only white space: a form sent with nothing pasted.
                    "properties": {"text": {"type": "string", "pattern": "\\S"}},
                }
            },
        },
    }
}


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")  # binary and broken UTF-8 still get an answer


async def _answer(request: Request, text: str, record: bool = True) -> KeptAnswer:
    """The answer, worked out in a worker thread within the paste budget (503 past it); with
    PITFALLS_INBOX on and `record`, an unmatched error is counted in the inbox (redacted, never
    the paste). The same paste under the same content mark is answered from memory (an
    unmatched one only while the inbox is off, so that every sighting is still counted)."""
    state = runtime_of(request)
    mark = await current_mark(state)
    key = AnswerCache.key(text, mark)
    kept = state.answers.get(key)
    if kept is not None:
        return kept
    kept = KeptAnswer(await _work_out(request, text, record, mark.feed))
    # Kept under the mark only when the matcher that answered stood at it: a matcher still
    # following another process's write must not leave its older answer under the new mark.
    if (kept.answer.known or not state.settings.inbox) and state.matchers.mark == mark.feed:
        state.answers.put(key, kept)
    return kept


async def _work_out(
    request: Request, text: str, record: bool, seen: storage.FeedMark | None = None
) -> Answer:
    state = runtime_of(request)
    client = voter_of(request) if record and state.settings.inbox else ""

    def work() -> Answer:
        parsed = parse_traceback(text)
        answer = answer_paste(
            text,
            engine=state.engine,
            matcher=state.matchers.current(at_least=seen),
            parsed=parsed,
            signer=state.report_rules.signer,
        )
        if record and state.settings.inbox and not answer.known:
            record_unknown(
                state.engine,
                parsed,
                client=client,
                per_hour=state.settings.inbox_per_client_per_hour,
                max_clusters=state.settings.inbox_max_clusters,
            )
        return answer

    return await run_within_budget(
        request, work, budget_ms=state.settings.match_budget_ms, limiter=state.paste_limiter
    )


@router.post(
    "/api/v1/match",
    tags=["api"],
    summary="Explain a traceback: known pitfalls that match it, why, and the fix",
    description=(
        'Send the paste as JSON `{"text": ...}` or as a text/plain body. `matches` holds the '
        'matches, best first: `"tier": "signature"` (a signature of the entry matched) before '
        '`"tier": "likely"` (no signature matched; the entry covers the error, with a calibrated '
        "confidence above the threshold). Empty when nothing matches; then `related` may hold "
        "entries that cover part of the error, and `foreign` names the library an error comes "
        "from when it is not PyTorch. With matches, `answer_token` is what a report to "
        "`POST /api/v1/outcomes` on one of them sends back. The paste is not stored."
    ),
    openapi_extra=_BODY_DOC,
    response_model=Answer,
)
async def match_api(request: Request) -> Response:  # an `Answer`, encoded once (see below)
    settings = runtime_of(request).settings  # not a dependency: a bot's repeated paste is hot
    text: str | None = getattr(request.state, "paste_text", None)  # read by `PasteShortcut`
    if text is None:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        body = await read_limited_body(request, paste_body_limit(content_type, settings))
        text = await decoded(len(body), paste_text, body, content_type, settings)
    # Encoded once per kept answer: a paste answered from memory costs no encoding either.
    return Response((await _answer(request, text)).json(), media_type="application/json")


def paste_body_limit(content_type: str, settings) -> int:
    """The largest body taken for a paste of `settings.max_paste_bytes`: JSON escapes a
    character in up to six bytes (\u00e9), a form in up to nine (a CJK character
    percent-encoded); the text itself is held to the limit."""
    is_json = content_type == "application/json"
    is_form = content_type == "application/x-www-form-urlencoded"  # the /match page's own form
    return settings.max_paste_bytes * (6 if is_json else 9 if is_form else 1) + (
        BODY_OVERHEAD_BYTES if is_json or is_form else 0
    )


def paste_text(body: bytes, content_type: str, settings) -> str:
    """The paste in a request body of `content_type`; an HTTPException (4xx) says what is wrong."""
    if not body:
        raise HTTPException(422, 'Send the paste as the body: JSON {"text": "..."} or plain text.')
    if content_type == "application/json":
        try:
            payload = json.loads(body)  # not empty: refused above
        except (ValueError, RecursionError):
            raise HTTPException(400, 'The body is not valid JSON; send {"text": "..."}.') from None
        if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
            raise HTTPException(422, 'Send a JSON object with a "text" string: {"text": "..."}.')
        text = payload["text"]
        if len(text.encode("utf-8", "surrogatepass")) > settings.max_paste_bytes:
            raise HTTPException(413, PASTE_TOO_LARGE.format(limit=settings.max_paste_bytes))
        return text
    if content_type == "application/x-www-form-urlencoded":
        text = form_fields_of(body).get("text", "")
        if len(text.encode("utf-8", "surrogatepass")) > settings.max_paste_bytes:
            raise HTTPException(413, PASTE_TOO_LARGE.format(limit=settings.max_paste_bytes))
        if not text.strip():
            raise HTTPException(422, "The form's text field is empty; paste a traceback into it.")
        return text
    return _decode(body)


class PasteForm(BaseModel):
    """How to ask for an answer: the twin of the empty paste page."""

    post_to: str = Field(description="Where to POST the paste.")
    accepts: list[str] = Field(description="The body's content types.")
    max_paste_bytes: int = Field(description="The largest paste taken (413 above).")


@router.get(
    "/api/v1/match",
    tags=["api"],
    summary="How to send a paste to POST /api/v1/match: content types and size limit",
)
def match_form_api(request: Request, settings: SettingsDep) -> PasteForm:
    return PasteForm(
        post_to=site_path(request, "/api/v1/match"),
        accepts=["application/json", "text/plain", "application/x-www-form-urlencoded"],
        max_paste_bytes=settings.max_paste_bytes,
    )


def _page(request: Request, text: str, answer: Answer | None, status: int = 200):
    context: dict = {"paste": text, "answer": answer, "frame_place": where}
    if answer is not None:  # the final error's frames, the user's last first, libraries folded
        parsed = answer.parsed.model_dump(include={"exceptions", "final", "user_frame"})
        context["folded"] = folded_from_answer(parsed)
    return render(request, "match.html", context, status_code=status)


@router.get("/match", response_class=HTMLResponse, include_in_schema=False)
async def match_form(request: Request, settings: SettingsDep, text: str = ""):
    """The paste form; with `?text=`, the answer to it (where the search box sends a paste).
    A GET changes nothing: an unmatched error is not counted in the inbox (a link or a crawler
    would count it again and again); the paste page's POST does."""
    if len(text.encode("utf-8", "surrogatepass")) > settings.max_paste_bytes:
        raise HTTPException(413, PASTE_TOO_LARGE.format(limit=settings.max_paste_bytes))
    kept = await _answer(request, text, record=False) if text.strip() else None
    return _page(request, text, kept.answer if kept else None)


@router.post("/match", response_class=HTMLResponse, include_in_schema=False)
async def match_page(request: Request, settings: SettingsDep):
    # The size limit applies while the body is read, before anything is decoded.
    text = (await form_fields(request)).get("text", "")
    if len(text.encode("utf-8", "surrogatepass")) > settings.max_paste_bytes:
        raise HTTPException(413, PASTE_TOO_LARGE.format(limit=settings.max_paste_bytes))
    return _page(request, text, (await _answer(request, text)).answer if text.strip() else None)


@router.post("/outcomes", include_in_schema=False)
async def outcome_form(request: Request):
    """ "Fixed it" / "Didn't help" from the answer or the entry page: a form with its CSRF
    token and the answer's token, throttled like the API; back to the entry's reports."""
    await check_csrf(request)
    form = await form_fields(request)
    entry_id = form.get("id", "")
    await runtime_of(request).writes.run(
        record_outcome,
        runtime_of(request).engine,
        fingerprint=form.get("fingerprint", ""),
        id=entry_id,
        worked=form.get("worked") == "yes",
        note=form.get("note", ""),
        voter=voter_of(request),
        answer_token=form.get("answer_token", ""),
        rules=runtime_of(request).report_rules,
    )
    return see_other(request, f"{entry_url(entry_id)}?reported=1#outcomes")


# ---- outcomes: did the fix work? ----

# The outcome report is an API route with the API's own guards and documented answers.
outcome_router = routers.api_router()


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


@outcome_router.post(
    "/outcomes",
    summary="Report whether an entry's fix worked for an error",
    description="Only for an entry that an answer of this server gave for this error: send "
    "the answer's `fingerprint` and `answer_token` with the entry's `id` (422 without the token; "
    "403 for a token of another entry or error, or an old one). One report per voter (user, "
    "token, or address) for each error and entry; a second replaces the first. A login or token "
    "may report PITFALLS_REPORTS_PER_HOUR times an hour, an address without one "
    "PITFALLS_ANONYMOUS_REPORTS_PER_HOUR (429 past it). The answer holds the entry's measured "
    "rates.",
    openapi_extra=json_body(
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
    return await runtime_of(request).writes.run(
        record_outcome,
        runtime_of(request).engine,
        fingerprint=body.fingerprint,
        id=body.id,
        worked=body.worked,
        note=body.note,
        voter=voter,
        answer_token=body.answer_token,
        rules=runtime_of(request).report_rules,
    )
