"""Running costly work for a request off the event loop, within a time budget.

The event loop only waits: the work runs in a worker thread from a small pool of its own (so it
can never take the threads that health checks and pages need), with a `Budget` in force that
its loops check. Past the budget, or when the client goes away, the work stops and the route
answers 503 with a sentence.
"""

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import anyio
from fastapi import HTTPException, Request
from starlette.requests import ClientDisconnect

from app.budget import Budget, BudgetExceeded

T = TypeVar("T")

BUSY_MESSAGE = (
    "This paste took longer than the server allows ({budget_ms} ms) and was stopped; "
    "paste only the end of the traceback, or try again when the server is less busy."
)


async def _stop_on_disconnect(request: Request, budget: Budget, scope: anyio.CancelScope) -> None:
    # The body has been read, so the next message is the disconnect, if the client leaves.
    message = await request.receive()
    if message["type"] == "http.disconnect":
        budget.cancel()
        scope.cancel()


async def run_within_budget(
    request: Request,
    func: Callable[..., T],
    *args,
    budget_ms: int,
    limiter: anyio.CapacityLimiter,
    message: str = BUSY_MESSAGE,
) -> T:
    budget = Budget(budget_ms / 1000)
    result: list[T] = []
    over_budget = False
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_disconnect, request, budget, group.cancel_scope)
        try:
            # The work checks its budget often and stops itself; this is the backstop.
            with anyio.fail_after(budget.remaining() + 0.2):
                result.append(
                    await anyio.to_thread.run_sync(
                        partial(budget.run, func, *args), limiter=limiter, abandon_on_cancel=True
                    )
                )
        except (BudgetExceeded, TimeoutError):
            budget.cancel()
            over_budget = True
        group.cancel_scope.cancel()
    if over_budget:
        raise HTTPException(503, message.format(budget_ms=budget_ms))
    if not result:  # the client went away: nobody will read an answer
        raise ClientDisconnect()
    return result[0]


WRITES_BUSY = (
    "The server is busy saving other changes and this one waited its turn for {wait_s:g} s; "
    "nothing was saved. Send it again in a few seconds."
)


class WriteQueue:
    """This process's database writes, in turn: one at a time on SQLite (it has one writer
    lock, and writers that race for it only make each other wait), a few at a time on
    PostgreSQL. A waiting write is a coroutine, not a thread, so a burst of saves never takes
    the threads that health checks and pages need; past `wait_s` in the queue it is a 503 with
    a sentence, and nothing was written. Once a write has started it runs to its end."""

    def __init__(self, *, at_once: int, wait_s: float) -> None:
        self._turns = anyio.Semaphore(at_once)
        self.wait_s = wait_s

    @property
    def waiting(self) -> int:
        return self._turns.statistics().tasks_waiting

    async def run(self, func: Callable[..., T], *args, **kwargs) -> T:
        try:
            with anyio.fail_after(self.wait_s):
                await self._turns.acquire()
        except TimeoutError:
            raise HTTPException(
                503, WRITES_BUSY.format(wait_s=self.wait_s), headers={"Retry-After": "5"}
            ) from None
        try:
            return await anyio.to_thread.run_sync(partial(func, *args, **kwargs))
        finally:
            self._turns.release()
