"""What a search returns: one page of hits with their highlights, the total, facet counts and
a suggestion. `SearchResult.to_dict` is the one JSON shape of `/api/v1/search` and
`pitfalls search --json`."""

from dataclasses import dataclass, field

from app.answer_shapes import entry_url


@dataclass(frozen=True)
class SearchHit:
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    score: float
    highlights: str  # HTML: escaped text with <mark> around the matched terms


@dataclass
class SearchResult:
    query: str
    total: int
    page: int
    limit: int
    hits: list[SearchHit]
    facets: dict[str, dict[str, int]] = field(default_factory=dict)
    suggestion: str | None = None
    relaxed: bool = False  # no entry had every word, so entries with any of them are shown
    corrected_from: str | None = None  # the typed query, when these are its corrected results

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.limit))

    def to_dict(self) -> dict:
        """The JSON shape shared by `/api/v1/search` and `pitfalls search --json`."""
        return {
            "query": self.query,
            "total": self.total,
            "page": self.page,
            "pages": self.pages,
            "limit": self.limit,
            # Not dataclasses.asdict: it deep-copies every field, a fifth of a new search.
            "hits": [
                {**vars(hit), "tags": list(hit.tags), "url": entry_url(hit.id)} for hit in self.hits
            ],
            "facets": self.facets,
            "suggestion": self.suggestion,
            "relaxed": self.relaxed,
            "corrected_from": self.corrected_from,
        }
