"""Time budgets for work done on behalf of one request: past its deadline the work stops.

A budget is set for the thread that does the work (a context variable), and the loops of the
parser, the matcher and the search check it often; `BudgetExceeded` unwinds the work, so a
paste or a query that runs too long frees its worker instead of running on unseen.
"""

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


class BudgetExceeded(RuntimeError):
    """The work ran past its time budget, or the client that asked for it went away."""


class Budget:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def check(self) -> None:
        if self.cancelled:
            raise BudgetExceeded("the request was cancelled")
        if time.monotonic() > self.deadline:
            raise BudgetExceeded(f"the work took longer than {self.seconds * 1000:.0f} ms")

    def within(self, outer: "Budget | None") -> "Budget":
        """This budget, cut short to end no later than `outer` (the work it is part of)."""
        if outer is not None and outer.deadline < self.deadline:
            self.deadline = outer.deadline
            self.seconds = outer.seconds
        if outer is not None and outer.cancelled:
            self.cancel()
        return self

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def run(self, func: Callable[..., T], *args, **kwargs) -> T:
        """Call `func` with this budget in force (in the calling thread)."""
        with in_force(self):
            self.check()
            return func(*args, **kwargs)


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("budget", default=None)


@contextmanager
def in_force(budget: Budget) -> Iterator[Budget]:
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def current_budget() -> Budget | None:
    return _current.get()


def check_budget() -> None:
    """Raise `BudgetExceeded` when the budget of the work in this thread has run out."""
    budget = _current.get()
    if budget is not None:
        budget.check()
