"""The routers each URL family declares: its JSON API under `/api/v1` and its HTML pages.

Both ask `read_access` unless the family is open (health, sign-in pages): a private site then
refuses anonymous readers everywhere at once, and a family cannot forget the guard.
"""

from fastapi import APIRouter, Depends

from app.web.auth import read_access
from app.web.http import errors


def api_router(tag: str = "api", *, guarded: bool = True) -> APIRouter:
    """`/api/v1` routes, documented under `tag`; a guarded router documents its 401."""
    if not guarded:
        return APIRouter(prefix="/api/v1", tags=[tag])
    return APIRouter(
        prefix="/api/v1", tags=[tag], dependencies=[Depends(read_access)], responses=errors(401)
    )


def page_router(*, guarded: bool = True) -> APIRouter:
    """HTML pages (left out of the OpenAPI document)."""
    dependencies = [Depends(read_access)] if guarded else []
    return APIRouter(include_in_schema=False, dependencies=dependencies)
