"""The one base class of the errors a caller can act on.

A `PitfallsError` is a refusal, not a fault: the request (or the command) asked for something
that cannot be done as asked, and the message says why in words a person can act on. Each
domain error subclasses it where it is defined and says how the web answers it: `status`, and
optionally `page_status` (a browser's page answers differently from the API, e.g. 409 for 412),
`headers` and `extra` (fields of the JSON error body). The web layer has one handler for all of
them (`app/web/errors.py`); any other exception is a bug in the server and answers 500 (or 503
when the database is down), never a client's 4xx.

Inner parts raise these without knowing HTTP exists: a status is only a number they carry.
"""

from collections.abc import Mapping


class PitfallsError(Exception):
    status: int = 400
    page_status: int | None = None  # a page's answer, when it differs from the API's

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def message(self) -> str:
        return str(self)

    def headers(self) -> Mapping[str, str] | None:
        return None

    def extra(self) -> dict:
        """Fields the JSON error body carries beside `status` and `message`."""
        return {}
