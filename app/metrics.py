"""What the app counts and times, in Prometheus' terms (served at /metrics).

Inner parts observe their own latency here (search, match); the web layer counts requests by
route template and status. One registry per process: with several uvicorn workers, each worker
is its own scrape target (or run one worker per replica, as the deployment does).
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

REQUESTS = Counter(
    "pitfalls_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "pitfalls_http_request_duration_seconds",
    "Time from request to the end of the response, by route template and method.",
    ["route", "method"],
    buckets=_FAST,
    registry=REGISTRY,
)
SEARCH_SECONDS = Histogram(
    "pitfalls_search_duration_seconds",
    "Time one search takes in the index (pages, API, CLI alike).",
    buckets=_FAST,
    registry=REGISTRY,
)
MATCH_SECONDS = Histogram(
    "pitfalls_match_duration_seconds",
    "Time one paste takes to parse and match, both tiers.",
    buckets=_FAST,
    registry=REGISTRY,
)
ENTRIES = Gauge("pitfalls_entries", "Active entries in the database.", registry=REGISTRY)
CHANGE_SEQ = Gauge(
    "pitfalls_change_seq", "The highest number in the database's change feed.", registry=REGISTRY
)
INDEX_LAG = Gauge(
    "pitfalls_index_lag_changes",
    "Changes in the feed this process's search index has not applied yet.",
    registry=REGISTRY,
)
INDEX_AGE = Gauge(
    "pitfalls_index_age_seconds",
    "Seconds since this process's search index last applied a change.",
    registry=REGISTRY,
)
