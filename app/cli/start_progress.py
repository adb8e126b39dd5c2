"""What a start prints on stderr while it gets the data dir ready: one line per step that does
work, the first ingest counted (a bar that redraws itself on a terminal, a line now and then in
a log), and the line that says where the server answers.

The inner parts only report `StartStep`s (app.bootstrap); how they look is decided here.
"""

import sys
import time
from typing import TextIO

from app.bootstrap import StartStep

BAR_WIDTH = 30
LOG_EVERY = 4  # a log (not a terminal) gets the count at each quarter, and at the end


class StartProgress:
    """A `prepare_data` on_step callback that prints each step as it happens."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self._began: dict[str, float] = {}
        self._bar_open = False  # a terminal line being redrawn
        self._logged: set[tuple[str, int]] = set()

    def __call__(self, step: StartStep) -> None:
        began = self._began.pop(step.name, None) if step.finished else None
        if not step.finished:
            self._began.setdefault(step.name, time.monotonic())
        took = f" ({time.monotonic() - began:.1f} s)" if began is not None else ""
        if step.total:
            self._count(step, took)
        else:
            self._line(f"{step.name}: {step.detail}{took}")

    def ready(self, url: str) -> None:
        self._line(f"ready at {url}")

    def close(self) -> None:
        """Ends a bar's line (after its last count, or a step that stopped short)."""
        if self._bar_open:
            self.stream.write("\n")
            self.stream.flush()
            self._bar_open = False

    # ---- drawing ------------------------------------------------------------------------

    def _count(self, step: StartStep, took: str) -> None:
        text = f"{step.name}: {step.detail} {step.done}/{step.total} entries"
        last = step.done == step.total
        if self.tty:
            filled = BAR_WIDTH * step.done // max(1, step.total)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self.stream.write(f"\r{text} [{bar}]{took}")
            self.stream.flush()
            self._bar_open = True
            if last:
                self.close()
            return
        quarter = LOG_EVERY * step.done // max(1, step.total)
        if (step.detail, quarter) not in self._logged or last:
            self._logged.add((step.detail, quarter))
            self._line(text + took)

    def _line(self, text: str) -> None:
        self.close()
        self.stream.write(text + "\n")
        self.stream.flush()
