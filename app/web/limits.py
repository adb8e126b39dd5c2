"""Reading a request body with a size limit: an oversized body is refused before it is all read."""

import codecs
import re
from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool

T = TypeVar("T")

# Room for the other fields of a form or JSON body that carries a paste or an entry.
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
    limit = 3 * request.app.state.settings.max_paste_bytes + BODY_OVERHEAD_BYTES
    body = await read_limited_body(request, limit, f"The {what} is larger than {{limit:,}} bytes.")
    request.state.write_body = body
    return body
