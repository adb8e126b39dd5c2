"""Request dependencies: what a route may ask for, under short names."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from app.search import SearchService
from app.settings import Settings


# The trivial dependencies are coroutines: a plain `def` costs a trip to the thread pool each,
# which on a new search was a fifth of the request.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


async def get_search(request: Request) -> SearchService:
    return request.app.state.search


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SearchDep = Annotated[SearchService, Depends(get_search)]
