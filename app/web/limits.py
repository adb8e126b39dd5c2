"""Reading a request body with a size limit: an oversized body is refused before it is all read."""

from fastapi import HTTPException, Request

# Room for the other fields of a form or JSON body that carries a paste or an entry.
BODY_OVERHEAD_BYTES = 64_000
PASTE_TOO_LARGE = "The paste is larger than {limit:,} bytes; paste the end of the traceback."


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
