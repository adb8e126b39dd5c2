"""What a search returns: one page of hits with their highlights, the total, facet counts and
a suggestion. `SearchResult.to_dict` is the one JSON shape of `/api/v1/search` and
`pitfalls search --json`."""

from dataclasses import dataclass, field

from app.plain_answers import entry_url


@dataclass(frozen=True)
class SearchHit:
    id: str
    title: str
    summary: str
    kind: str
    tags: list[str]
    score: float
    highlights: str  # HTML: escaped text with <mark> around the matched terms


@dataclass(frozen=True)
class FilterDropped:
    """A search without one of the query's filters, offered when the filters left nothing."""

    label: str  # the filter as typed (`tag:cuda`) or as given (`kind:hang` for kind=hang)
    query: str  # the query text without it
    kind: str | None  # the kind and tag parameters without it
    tag: str | None
    total: int  # what that search finds


@dataclass(frozen=True)
class FilterNote:
    """Why a filtered search found nothing, and the searches without each filter."""

    message: str
    without: list[FilterDropped]

    def to_dict(self) -> dict:
        return {"message": self.message, "without": [vars(w) for w in self.without]}


@dataclass(frozen=True)
class TellApart:
    """One of the entries that fit an ambiguous query, and the words only it says."""

    id: str
    title: str
    summary: str
    kind: str
    words: list[str]  # of its title and summary, that the other entries' do not hold

    def to_dict(self) -> dict:
        return {**vars(self), "words": list(self.words), "url": entry_url(self.id)}


@dataclass(frozen=True)
class Ambiguity:
    """Two or three entries that fit a query about equally, shown together."""

    message: str
    entries: list[TellApart]

    def to_dict(self) -> dict:
        return {"message": self.message, "entries": [e.to_dict() for e in self.entries]}


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
    # Entries that matched some words but fell below the relevance floor: not counted in
    # `total`, not paged; the first few are listed, `loose_total` counts them all.
    loose: list[SearchHit] = field(default_factory=list)
    loose_total: int = 0
    filter_note: FilterNote | None = None  # set when the query's filters left nothing
    # Set when the first two or three hits fit about equally (`app.search.ambiguity`).
    ambiguous: Ambiguity | None = None

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
            "loose": [
                {**vars(hit), "tags": list(hit.tags), "url": entry_url(hit.id)}
                for hit in self.loose
            ],
            "loose_total": self.loose_total,
            "filter_note": self.filter_note.to_dict() if self.filter_note else None,
            "ambiguous": self.ambiguous.to_dict() if self.ambiguous else None,
        }
