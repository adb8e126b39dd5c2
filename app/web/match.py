"""Paste a traceback: the /match page and its JSON twin, POST /api/v1/match."""

import json

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.answers import Answer, answer_paste
from app.entry_details import entry_url
from app.inbox import record_unknown
from app.outcomes import OutcomeRefused, record_outcome
from app.tracebacks import parse_traceback
from app.web.api import voter_of
from app.web.auth import check_csrf, form_fields, read_access
from app.web.caching import AnswerCache, KeptAnswer, current_mark, is_anonymous
from app.web.deps import SettingsDep
from app.web.headers import SECURITY_HEADER_LIST
from app.web.limits import (
    BODY_OVERHEAD_BYTES,
    PASTE_TOO_LARGE,
    decoded,
    form_fields_of,
    read_limited_body,
)
from app.web.offload import run_within_budget
from app.web.pages import render
from app.web.paths import see_other, site_path

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
    state = request.app.state
    key = AnswerCache.key(text, await current_mark(state))
    kept = state.answers.get(key)
    if kept is not None:
        return kept
    kept = KeptAnswer(await _work_out(request, text, record))
    if kept.answer.known or not state.settings.inbox:
        state.answers.put(key, kept)
    return kept


async def _work_out(request: Request, text: str, record: bool) -> Answer:
    state = request.app.state
    client = voter_of(request) if record and state.settings.inbox else ""

    def work() -> Answer:
        parsed = parse_traceback(text)
        answer = answer_paste(
            text,
            engine=state.engine,
            matcher=state.matchers.current(),
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
)
async def match_api(request: Request) -> Answer:
    settings = request.app.state.settings  # not a dependency: a bot's repeated paste is hot
    text = getattr(request.state, "paste_text", None)  # read already by `PasteShortcut`
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


class PasteShortcut:
    """Pure ASGI: `POST /api/v1/match` from an anonymous reader of a public site, with a paste
    already answered under the current content mark (`AnswerCache`), is answered here, before
    the session, routing and dependencies: a CI job failing the same way again and again costs
    what the framework costs. Anything else (a new paste, a token, a cookie, a form, a body
    that is not a valid paste) goes on to the route untouched, its body replayed."""

    PATH = "/api/v1/match"
    CONTENT_TYPES = (b"application/json", b"text/plain", b"")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route = None  # the route's object, for /metrics: seen on the first pass-through

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        root, path = scope.get("root_path", ""), scope["path"]
        if root and path.startswith(root):
            path = path[len(root) :]
        state = scope["app"].state
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if (
            path != self.PATH
            or content_type not in self.CONTENT_TYPES
            or not state.settings.public_read
            or not is_anonymous(headers)
            or not hasattr(state, "answers")
        ):
            await self.app(scope, receive, send)
            return
        settings = state.settings
        limit = paste_body_limit(content_type.decode("latin-1"), settings)
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= limit:
            message = await receive()
            if message["type"] != "http.request":  # gone: let the app see it as it is
                await self.app(scope, _replay(chunks, receive, message), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        kept = None
        if not more and size <= limit:  # past the limit, the route answers 413
            try:
                text = await decoded(
                    size, paste_text, b"".join(chunks), content_type.decode("latin-1"), settings
                )
            except HTTPException:
                text = None
            if text is not None:
                kept = state.answers.get(AnswerCache.key(text, await current_mark(state)))
                scope.setdefault("state", {})["paste_text"] = text  # the route need not read it
        if kept is None or self._route is None:
            await self.app(scope, _replay(chunks, receive, None, more), send)
            self._route = self._route or scope.get("route")
            return
        scope["route"] = self._route  # counted in /metrics as the route's
        body = kept.json()
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADER_LIST,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})


def _replay(chunks: list[bytes], receive: Receive, last: Message | None, more: bool = False):
    """A `receive` that gives back what was read (one message), then reads on."""
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": more}]
    if last is not None:
        pending = [pending[0] | {"more_body": True}, last] if chunks else [last]

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


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
    return render(request, "match.html", {"paste": text, "answer": answer}, status_code=status)


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
    try:
        await request.app.state.writes.run(
            record_outcome,
            request.app.state.engine,
            fingerprint=form.get("fingerprint", ""),
            id=entry_id,
            worked=form.get("worked") == "yes",
            note=form.get("note", ""),
            voter=voter_of(request),
            answer_token=form.get("answer_token", ""),
            rules=request.app.state.report_rules,
        )
    except OutcomeRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return see_other(request, f"{entry_url(entry_id)}?reported=1#outcomes")
