"""The change feed's mark, as a value: kept apart from the feed's queries so that a reader of
the search index's state (the CLI) need not import SQLAlchemy to compare marks."""

from typing import NamedTuple


class FeedMark(NamedTuple):
    """How many changes the feed holds and its highest sequence number: a cache that has applied
    as many changes as there are, up to the same number, has missed none (sequence numbers have
    gaps, where a transaction rolled back, so the highest number alone cannot tell)."""

    count: int  # type: ignore[assignment]  # shadows tuple.count(), which nothing calls
    seq: int
