"""What every route family shares: the one error shape and its OpenAPI, reading a body within
its limits, paths on this site (one root-path function), and rendering a page."""

import codecs
import json
import re
from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field, ValidationError

from app.web.middleware.twins import route_path, twin_path
from app.web.runtime import runtime_of


class ProblemOut(BaseModel):
    line: int
    message: str
    severity: str


class ErrorDetail(BaseModel):
    status: int = Field(description="The HTTP status again.", examples=[404])
    message: str = Field(description="What went wrong and what to do, in a sentence or two.")
    problems: list[ProblemOut] | None = Field(
        None, description="A refused entry's problems, by line (422 and 409 from a save)."
    )
    current_revision: int | None = Field(
        None, description="The entry's current revision (412); the `ETag` header carries it too."
    )


class ErrorResponse(BaseModel):
    """Every error of the API has this shape: `{"error": {"status": ..., "message": ...}}`."""

    error: ErrorDetail


# What each status means here; a route lists the ones its guards and its work can answer.
ERROR_MEANINGS = {
    400: "The body or a header cannot be read: not JSON, not UTF-8, nested too deeply, or an "
    "If-Match that is not a list of entity tags.",
    401: "No valid credentials: the bearer token is unknown, expired or revoked, or the route "
    "needs a login or a token (writing always; reading when PITFALLS_PUBLIC_READ=false).",
    403: "The token's scope or the user's role does not allow this, or a browser session sent "
    "no CSRF token.",
    404: "There is no such entry or revision.",
    409: "The entry's id is taken by another entry; `problems` says where.",
    412: "If-Match names none of the entry's current revision (someone saved since); "
    "`current_revision` and the `ETag` header say which is current.",
    413: "The body is larger than the limit.",
    422: "The request or the entry does not pass validation; for an entry, `problems` lists "
    "what to fix by line.",
    428: "If-Match is missing: send the ETag of the revision you edited (or `*`).",
    429: "Too many reports from this address without a login or token; try again later.",
    503: "Searching or matching is unavailable for a moment, or took longer than its budget; "
    "or a write waited too long for its turn (nothing was saved); or the database is "
    "unreachable or its disk is full.",
}


def errors(*statuses: int) -> dict[int | str, dict]:
    """`responses=` for a route: each status with its meaning and the one error shape."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_MEANINGS[status]}
        for status in sorted(statuses)
    }


def required_fields(model: type[BaseModel]) -> str:
    names = [f'"{name}"' for name, field in model.model_fields.items() if field.is_required()]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


NOT_UNICODE = (
    "The request holds text that is not valid Unicode (a lone surrogate such as \\ud800); "
    "send UTF-8 text."
)


def _json_text(body: bytes):
    """A JSON body whose every string is real text: JSON's `\\ud800` escape decodes to a lone
    surrogate, which no database or UTF-8 writer takes (UnicodeEncodeError, refused here while
    the request is decoded rather than wherever the text would first be written)."""
    payload = json.loads(body)
    pending = [payload]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            value.encode("utf-8")
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return payload


async def read_json(request: Request, model: type[BaseModel]):
    """The JSON body as `model`, read after the caller is authorized, within the size limit."""
    body = await read_write_body(request, "body")
    if not body.strip():
        raise HTTPException(
            422, f"The body is empty; send a JSON object with {required_fields(model)}."
        )
    try:
        payload = await decoded(len(body), _json_text, body)
    except RecursionError:
        raise HTTPException(400, "The request is nested too deeply to read.") from None
    except UnicodeEncodeError:
        raise HTTPException(400, NOT_UNICODE) from None
    except ValueError:
        raise HTTPException(400, "The body is not valid JSON.") from None
    if not isinstance(payload, dict):
        kind = "null" if payload is None else type(payload).__name__
        raise HTTPException(
            422, f"The body must be a JSON object with {required_fields(model)}, not {kind}."
        )
    try:
        return model.model_validate(payload)
    except ValidationError as exc:  # answered like FastAPI's own body errors
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


def json_body(model: type[BaseModel], example: dict) -> dict:
    schema = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema, "example": example}},
        }
    }


T = TypeVar("T")


# Room for the other fields of a form or JSON body that carries a paste or an entry.
MCP_PATH = "/mcp"
# JSON-RPC's band of implementation-defined server errors (-32000..-32019); the SDK's own
# codes are -32000 and -32001: /mcp's refusals (app.web.mcp_http, app.web.mcp_loading) use this.
MCP_ACCESS_REFUSED = -32010

BODY_OVERHEAD_BYTES = 64_000


PASTE_TOO_LARGE = "The paste is larger than {limit:,} bytes; paste the end of the traceback."


# A body past this size is decoded (JSON, a form's percent-encoding) in a worker thread: a
# three-megabyte form of Chinese text takes a third of a second to decode, which the event loop
# must not spend. Smaller ones cost less than the hand-off.
OFF_LOOP_BYTES = 64_000


# A `%` not followed by two hex digits stands for itself, as `urllib.parse.unquote` reads it.
_LONE_PERCENT = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def unquote_form_value(data: bytes) -> str:
    """`urllib.parse.unquote_plus` of a form's name or value, at C speed.

    unquote's pure-Python loop costs 0.3 s on a three-megabyte form of Chinese text, and in a
    thread it still holds the interpreter long enough to stall the event loop. Here every step
    runs in C: `%XX` becomes `\\xXX` (backslashes doubled first), which `codecs.escape_decode`
    (the decoder pickle uses) turns into bytes; then UTF-8, with broken sequences replaced.
    """
    raw = data.replace(b"+", b" ")
    if b"%" in raw:
        raw = _LONE_PERCENT.sub(b"%25", raw).replace(b"\\", b"\\\\").replace(b"%", b"\\x")
        raw = codecs.escape_decode(raw)[0]
    return raw.decode("utf-8", errors="replace")


def form_fields_of(body: bytes) -> dict[str, str]:
    """An urlencoded body's fields, the first value of each, blank ones kept (as `parse_qs`
    with `keep_blank_values` reads them)."""
    fields: dict[str, str] = {}
    for pair in body.split(b"&"):
        if pair:
            name, _, value = pair.partition(b"=")
            fields.setdefault(unquote_form_value(name), unquote_form_value(value))
    return fields


async def decoded(size: int, decode: Callable[..., T], *args) -> T:
    """`decode(*args)` for a body of `size` bytes: in place when small, in a thread when not."""
    if size <= OFF_LOOP_BYTES:
        return decode(*args)
    return await run_in_threadpool(decode, *args)


async def read_limited_body(request: Request, limit: int, message: str = PASTE_TOO_LARGE) -> bytes:
    """The request body, refused with 413 past `limit` bytes (before reading it all)."""
    declared = request.headers.get("content-length")
    too_large = message.format(limit=limit)
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, too_large)
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise HTTPException(413, too_large)
    return bytes(body)


async def read_write_body(request: Request, what: str) -> bytes:
    """The body of a form or JSON request that may carry a paste or an entry's text.

    Percent-encoding makes a form up to three times the size of its text (a CJK character is
    three UTF-8 bytes, nine once encoded), so the body may be that large; the decoded text is
    then held to `max_paste_bytes`, the same limit as the API's.
    """
    # Read once: a form's CSRF field may be looked at before the route reads the body itself.
    cached = getattr(request.state, "write_body", None)
    if cached is not None:
        return cached
    limit = 3 * runtime_of(request).settings.max_paste_bytes + BODY_OVERHEAD_BYTES
    body = await read_limited_body(request, limit, f"The {what} is larger than {{limit:,}} bytes.")
    request.state.write_body = body
    return body


def root_of(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def site_path(request: Request, path: str) -> str:
    """`path` (starting with /, relative to the app) as the browser must ask for it."""
    return root_of(request) + path


def app_path(request: Request) -> str:
    """The request's own path relative to the app (without the root path), with its query."""
    path = route_path(request.scope)
    return path + (f"?{request.url.query}" if request.url.query else "")


def see_other(request: Request, path: str) -> RedirectResponse:
    return RedirectResponse(site_path(request, path), status_code=303)


def public_base(request: Request) -> str:
    """The site's address for ids and links that leave the site (Atom, OpenSearch): the
    configured public URL, else the request's own (scheme and host as a trusted proxy gave
    them, with the root path)."""
    configured = runtime_of(request).settings.public_url
    if configured:
        return configured
    return str(request.base_url).rstrip("/")


def render(
    request: Request,
    template: str,
    context: dict,
    alternate: str | None = None,
    status_code: int = 200,
):
    # The JSON twin comes from the one table of twins; `alternate` only for a page outside it.
    alternate = twin_path(request) or alternate
    response = runtime_of(request).templates.TemplateResponse(
        request, template, {**context, "alternate": alternate}, status_code=status_code
    )
    if alternate:
        link = site_path(request, alternate)
        response.headers["Link"] = f'<{link}>; rel="alternate"; type="application/json"'
    return response
