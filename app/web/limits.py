"""Reading a request body with a size limit: an oversized body is refused before it is all read."""

from fastapi import HTTPException, Request

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
