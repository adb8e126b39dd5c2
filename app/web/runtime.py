"""What a running app holds, in one typed object: `Runtime`, built by the lifespan.

Every route, dependency and middleware reaches the process's parts through `runtime_of`
(or the `RuntimeDep` dependency), never through `app.state`'s untyped attributes; a type
checker sees what each part is. `refresh()` is the one way this process's caches catch up
with the change feed: the feed follower calls it between requests, and a request that wrote
calls `expire()` so that its own next read sees the write. (A commit also expires the
watchers at once, from the listeners in `app.change_feed` and `middleware.caching`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Request
from starlette.types import Scope

if TYPE_CHECKING:  # for the type checker only: every web module imports this one
    import anyio
    from authlib.integrations.starlette_client import StarletteOAuth2App
    from fastapi.templating import Jinja2Templates
    from sqlalchemy import Engine
    from sqlmodel import Session

    from app.answers import MatcherCache
    from app.change_feed import FeedFollower
    from app.matching import SignatureMatcher
    from app.outcomes import ReportRules
    from app.search import SearchService
    from app.settings import Settings
    from app.web.middleware.caching import AnswerCache, MarkReader
    from app.web.offload import WriteQueue
    from app.webhooks import WebhookWorker


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    templates: Jinja2Templates
    report_rules: ReportRules  # who may report an outcome, signed answer tokens
    marks: MarkReader  # the content mark that keys kept pages and answers
    answers: AnswerCache  # answers to pastes, kept under the content mark
    writes: WriteQueue  # every write, one at a time on SQLite
    search: SearchService
    matchers: MatcherCache
    paste_limiter: anyio.CapacityLimiter  # threads for matching pastes
    search_limiter: anyio.CapacityLimiter  # threads for searches
    password_limiter: anyio.CapacityLimiter  # threads for argon2
    follower: FeedFollower | None = None
    oidc: StarletteOAuth2App | None = None  # the OpenID Connect provider's client, when set up
    webhooks: WebhookWorker | None = None  # sends queued webhook deliveries

    def expire(self) -> None:
        """After this process wrote: the next search and paste read the feed again."""
        self.search.expire()
        self.matchers.expire()

    def signatures_for_save(self, session: Session) -> SignatureMatcher:
        """The process's compiled signatures, brought up to the feed's mark as `session` reads
        it (from what changed since, without reading the other entries): what a save checks a
        draft against."""
        from app import storage

        return self.matchers.current(at_least=storage.feed_mark(session)).signatures

    def refresh(self) -> None:
        """Catch up with the change feed: the index applies what changed, the matcher is
        rebuilt from what changed (in the calling thread, never a request's)."""
        self.search.expire()
        self.search.catch_up()
        self.matchers.expire()
        self.matchers.current()


def runtime_of(where: Request | FastAPI | Scope) -> Runtime:
    """The app's runtime, from a request, the app, or an ASGI scope (middleware)."""
    if isinstance(where, Request):
        app = where.app
    elif isinstance(where, FastAPI):
        app = where
    else:
        app = where["app"]
    return app.state.runtime


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]
