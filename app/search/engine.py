"""What the two search engines share, and what the index and the search service ask of them.

The fields a query searches, with their boosts, are one table for both engines, so a query
scores alike on either. `SearchEngine` is what `app.search.index.load_engine` returns: the
module `app.search.whoosh_engine` or `app.search.tantivy_engine`, which write and read the
files of one generation. The engines import this module and never the index, so the index may
import them (lazily: tantivy is an optional extra) without a cycle.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from whoosh.query import Query

from app.search.query import QueryBuilder

# Field boosts: id and title > aliases > signatures and questions > summary, glossary > body
# (aliases and glossary chosen on half A of the real question titles, bench/questions.py).
FIELD_BOOSTS = {
    "id_text": 6.0,
    "title": 5.0,
    "aliases": 6.0,
    "questions": 3.0,
    "glossary": 2.0,
    "signatures": 3.0,
    "summary": 2.0,
    "body": 1.0,
    "code": 1.0,
}
SEARCH_FIELDS = tuple(FIELD_BOOSTS)


class Collected(Protocol):
    """The matches of one query: the best ones ranked, and how many there are in all."""

    @property
    def ranked(self) -> list[tuple[float, Any]]: ...  # (score, the engine's document key)
    @property
    def total(self) -> int: ...


class EngineReader(Protocol):
    """One engine's reader of one generation, used by one thread at a time.

    Document keys (in `Collected.ranked`, `part_documents`, `stored`) and what `collect`
    returns are the engine's own; the service only hands them back to the same reader.
    """

    def up_to_date(self) -> bool: ...
    def close(self) -> None: ...
    def query_builder(self) -> QueryBuilder: ...
    def bound(self, query: Query) -> Query: ...
    def doc_count(self) -> int: ...
    def collect(self, query: Query, limit: int) -> Collected: ...
    def narrow(self, collected: Any, docs: list[Any]) -> Any: ...  # only these, for facets
    def part_documents(self, query: Query, among: list[Any]) -> tuple[int, set[Any]]: ...
    def facets(self, collected: Any) -> dict[str, dict[str, int]]: ...
    def known_word(self, lowered: str) -> bool: ...
    def correction(self, lowered: str) -> str | None: ...
    def stored(self, doc: Any) -> dict: ...


class EngineIndex(Protocol):
    """An open generation, which hands out readers."""

    def reader(self) -> EngineReader: ...
    def close(self) -> None: ...


class SearchEngine(Protocol):
    """An engine: the functions of its module that write and open a generation."""

    def write_generation(self, generation: Path, docs: Iterable[dict], cjk: str = ...) -> None:
        """Write a complete index of `docs` into the empty folder `generation`."""

    def apply_changes(
        self, generation: Path, entry_ids: list[str], documents: dict[str, dict]
    ) -> bool:
        """Replace or delete the documents of `entry_ids`; False when another writer holds
        the generation (it is applying the same changes)."""

    def open_index(self, generation: Path) -> EngineIndex:
        """The generation, open for reading."""
