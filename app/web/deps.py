"""Request dependencies: what a route may ask for, under short names."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlmodel import Session

from app.search import SearchService
from app.settings import Settings
from app.web.runtime import runtime_of


# The trivial dependencies are coroutines: a plain `def` costs a trip to the thread pool each,
# which on a new search was a fifth of the request.
async def get_settings(request: Request) -> Settings:
    return runtime_of(request).settings


def get_session(request: Request) -> Iterator[Session]:
    with Session(runtime_of(request).engine) as session:
        yield session


async def get_search(request: Request) -> SearchService:
    return runtime_of(request).search


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SearchDep = Annotated[SearchService, Depends(get_search)]


# The largest integer a database column holds (SQLite and PostgreSQL `bigint`: signed 64 bits).
# A larger revision number or sequence is one that cannot exist: declaring the bound lets the
# OpenAPI say so, and the request is refused as invalid (422) before any query is built.
MAX_STORED_INT = 2**63 - 1

RevisionNumber = Annotated[int, Path(ge=1, le=MAX_STORED_INT, description="A revision number.")]
