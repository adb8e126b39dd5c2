"""The HTTP API's contract: conditional requests, timestamps, Allow on 405, required bodies, and
an OpenAPI document that lists every status a route can answer, each with the one error shape."""

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient

from app.models import UtcDateTime, utc_iso
from app.web.auth import Editor
from tests import test_wiki
from tests.conftest import entry_text
from tests.test_wiki import Wiki

wiki = test_wiki.wiki  # the fixture: an app over three entries, with users and tokens


def _edit(wiki: Wiki, if_match: str | None, text: str = "Edited.", entry_id: str = "first-entry"):
    headers = wiki.bearer("ci-bot")
    if if_match is not None:
        headers["If-Match"] = if_match
    markdown = entry_text(entry_id).replace("An error.", f"An error. {text}")
    return wiki.anonymous().put(
        f"/api/v1/entries/{entry_id}",
        json={"markdown": markdown, "message": text},
        headers=headers,
    )


# ---- If-Match (RFC 9110 13.1.1) ----------------------------------------------------------------


def test_if_match_lists_weak_tags_and_stars(wiki: Wiki):
    assert _edit(wiki, '"1"', "one").headers["etag"] == '"2"'
    for header in ('"1"', '"abc"', '"1", "7"', 'W/"2"', 'W/"2", "5"', '""'):
        refused = _edit(wiki, header, "stale")
        assert refused.status_code == 412, (header, refused.status_code, refused.text)
        assert refused.json()["error"]["current_revision"] == 2
        assert refused.headers["etag"] == '"2"'
    weak = _edit(wiki, 'W/"2"', "weak").json()["error"]["message"]
    assert "compares strongly" in weak and '"2"' in weak
    assert _edit(wiki, '"1", "2"', "two").headers["etag"] == '"3"'  # the list names the current
    assert _edit(wiki, '"9",W/"1" , "3"', "three").headers["etag"] == '"4"'
    assert _edit(wiki, "*", "star").headers["etag"] == '"5"'
    for malformed in ("3", "W/3", '"3" junk', ","):
        bad = _edit(wiki, malformed, "bad")
        assert bad.status_code == 400 and "entity tags" in bad.json()["error"]["message"]
    assert _edit(wiki, None, "none").status_code == 428
    assert _edit(wiki, "", "empty").status_code == 428
    missing = _edit(wiki, '"1"', entry_id="no-such-entry")
    assert missing.status_code == 404
    assert wiki.anonymous().get("/api/v1/entries/first-entry").json()["revision"] == 5


def test_the_caller_is_checked_before_the_precondition(wiki: Wiki):
    url = "/api/v1/entries/first-entry"
    assert wiki.anonymous().put(url, json={}).status_code == 401
    read_only = wiki.anonymous().put(url, json={}, headers=wiki.bearer("reader-bot"))
    assert read_only.status_code == 403


# ---- timestamps --------------------------------------------------------------------------------

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def test_every_json_timestamp_is_utc_with_a_z(wiki: Wiki):
    assert _edit(wiki, '"1"', "Stamp").status_code == 200
    client = wiki.anonymous()
    urls = [
        "/api/v1/health",
        "/api/v1/overview",
        "/api/v1/tags/tensor",
        "/api/v1/search?q=failure",
        "/api/v1/entries/first-entry",
        "/api/v1/entries/first-entry/revisions",
        "/api/v1/entries/first-entry/revisions/1",
        "/api/v1/changes",
    ]
    stamps = []
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        stamps += [(url, s) for s in _strings(response.json()) if TIMESTAMP.match(s)]
    assert {url for url, _ in stamps} >= {
        "/api/v1/health",
        "/api/v1/overview",
        "/api/v1/entries/first-entry",
        "/api/v1/changes",
    }
    bad = [(url, s) for url, s in stamps if not s.endswith("Z")]
    assert bad == []
    for _, stamp in stamps:
        assert datetime.fromisoformat(stamp).utcoffset() == timedelta(0)


def test_stored_times_come_back_in_utc_from_either_database():
    column = UtcDateTime()
    berlin = timezone(timedelta(hours=2))
    from_postgres = column.process_result_value(datetime(2026, 5, 1, 12, tzinfo=berlin), None)
    from_sqlite = column.process_result_value(datetime(2026, 5, 1, 10), None)
    assert from_postgres == from_sqlite and from_sqlite.tzinfo is UTC
    assert column.process_bind_param(datetime(2026, 5, 1, 12, tzinfo=berlin), None).hour == 10
    assert utc_iso(datetime(2026, 5, 1, 12, tzinfo=berlin)) == "2026-05-01T10:00:00Z"
    assert utc_iso(datetime(2026, 5, 1, 10, 0, 0, 5)) == "2026-05-01T10:00:00.000005Z"


# ---- 405 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/api/v1/entries/first-entry", "GET, PUT, DELETE"),
        ("PATCH", "/api/v1/entries/first-entry", "GET, PUT, DELETE"),
        ("GET", "/api/v1/entries/first-entry/revisions/1/restore", "POST"),
        ("DELETE", "/api/v1/entries", "GET, POST"),
        ("DELETE", "/login", "GET, POST"),
    ],
)
def test_405_lists_every_method_of_the_path(wiki: Wiki, method, path, allow):
    response = wiki.anonymous().request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow


# ---- required bodies ---------------------------------------------------------------------------


def test_a_required_body_that_is_missing_gets_422_with_a_sentence(wiki: Wiki):
    client, headers = wiki.anonymous(), wiki.bearer("ci-bot")
    calls = [
        ("POST", "/api/v1/entries", {}),
        ("PUT", "/api/v1/entries/first-entry", {"If-Match": '"1"'}),
        ("POST", "/api/v1/drafts/check", {}),
    ]
    for method, url, extra in calls:
        for body in (b"", b"  \n", b"null", b"[]", b'"text"'):
            response = client.request(
                method,
                url,
                content=body,
                headers={**headers, **extra, "Content-Type": "application/json"},
            )
            assert response.status_code == 422, (method, url, body, response.text)
            message = response.json()["error"]["message"]
            assert message.endswith(".") and '"markdown"' in message, message
    entries = client.post("/api/v1/entries", content=b"", headers=headers)
    assert entries.json()["error"]["message"] == (
        'The body is empty; send a JSON object with "markdown" and "message".'
    )
    field = client.post("/api/v1/entries", json={"markdown": "x"}, headers=headers)
    assert field.status_code == 422 and "message" in field.json()["error"]["message"]


# ---- OpenAPI -----------------------------------------------------------------------------------

# What a route's guards and work imply it can answer.
GUARD_STATUSES = {
    "read_access": {401},  # a bad token; a login when reading is private
    "require_editor": {401, 403},
    "require_admin": {401, 403},
    "require_reader": {401, 403},
    "if_match": {400, 412, 428},
    "get_search": {503},  # the index unavailable, or a search past its budget
}
BODY_STATUSES = {400, 413, 422}  # a body that cannot be read, is too large, or is invalid
# Statuses no dependency shows, and the routes that answer them.
EXTRA_STATUSES = {
    ("POST", "/api/v1/match"): {503},  # matching past its budget
    ("POST", "/api/v1/entries"): {409},  # the id is taken, also by a create a moment ago
    ("PUT", "/api/v1/entries/{entry_id}"): {409},
    ("POST", "/api/v1/entries/{entry_id}/revisions/{number}/restore"): {409, 412, 422},
}
# Guards whose usual status this route never answers, and why.
NOT_ANSWERED = {
    ("GET", "/api/v1/health"): {503},  # reports a damaged index in its body, as "degraded"
}


def _calls(dependant) -> set[str]:
    names = set()
    for dependency in dependant.dependencies:
        names.add(getattr(dependency.call, "__name__", ""))
        names |= _calls(dependency)
    return names


def _api_routes(app):
    try:
        from fastapi.routing import iter_route_contexts

        routes = list(iter_route_contexts(app.routes))
    except ImportError:
        routes = app.routes
    for route in routes:
        # The OpenAPI names a path without its convertors ({hook_id:int} is {hook_id}).
        path = getattr(route, "path_format", None) or getattr(route, "path", "") or ""
        if path.startswith("/api/v1") and getattr(route, "include_in_schema", True):
            for method in route.methods:
                yield method, path, route


def undocumented_statuses(app) -> list[str]:
    """Every (route, status) its guards imply but its OpenAPI entry does not list."""
    paths = app.openapi()["paths"]
    missing = []
    for method, path, route in _api_routes(app):
        implied = set()
        for name in _calls(route.dependant):
            implied |= GUARD_STATUSES.get(name, set())
        if route.dependant.path_params:
            implied |= {404, 422}
        if route.dependant.query_params:
            implied.add(422)
        operation = paths[path][method.lower()]
        if "requestBody" in operation:
            implied |= BODY_STATUSES
        implied |= EXTRA_STATUSES.get((method, path), set())
        implied -= NOT_ANSWERED.get((method, path), set())
        documented = {int(code) for code in operation["responses"] if code.isdigit()}
        missing += [f"{method} {path}: {status}" for status in sorted(implied - documented)]
    return missing


def test_openapi_documents_every_status_a_route_can_answer(wiki: Wiki):
    assert undocumented_statuses(wiki.app) == []
    schema = wiki.app.openapi()
    error = schema["components"]["schemas"]["ErrorResponse"]
    assert error["required"] == ["error"]
    detail = schema["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"status", "message"}
    assert detail["properties"]["status"]["type"] == "integer"
    assert detail["properties"]["message"]["type"] == "string"
    assert "HTTPValidationError" not in schema["components"]["schemas"]  # not our shape
    count = 0
    for path, operations in schema["paths"].items():
        if not path.startswith("/api/v1"):
            continue
        for operation in operations.values():
            for code, response in operation["responses"].items():
                if int(code) >= 400:
                    count += 1
                    content = response["content"]["application/json"]["schema"]
                    assert content == {"$ref": "#/components/schemas/ErrorResponse"}, (path, code)
                    assert response["description"]
    assert count >= 50


def test_the_openapi_walk_catches_an_undocumented_guard(wiki: Wiki):
    """The walk is not vacuous: a guarded route without `responses=` shows up in it."""
    extra = APIRouter()

    @extra.post("/api/v1/forgotten/{entry_id}")
    def forgotten(entry_id: str, principal: Editor) -> dict:
        return {"ok": True}

    wiki.app.include_router(extra)
    wiki.app.openapi_schema = None
    try:
        missing = undocumented_statuses(wiki.app)
    finally:
        wiki.app.router.routes.pop()
        wiki.app.openapi_schema = None
    assert missing == [
        "POST /api/v1/forgotten/{entry_id}: 401",
        "POST /api/v1/forgotten/{entry_id}: 403",
        "POST /api/v1/forgotten/{entry_id}: 404",
    ]


def test_the_openapi_document_is_served(wiki: Wiki):
    client = TestClient(wiki.app)
    paths = client.get("/openapi.json").json()["paths"]
    put = paths["/api/v1/entries/{entry_id}"]["put"]
    assert {"401", "403", "404", "409", "412", "413", "422", "428"} <= set(put["responses"])
    assert "W/" in put["description"]


# ---- the OpenAPI states what the server refuses -------------------------------------------------


def _operation(spec: dict, method: str, path: str) -> dict:
    return spec["paths"][path][method]


def _parameter(operation: dict, name: str) -> dict:
    return next(p for p in operation["parameters"] if p["name"] == name)["schema"]


def test_the_openapi_states_the_bounds_the_server_enforces(wiki: Wiki):
    """Each request shape that the schema allowed and the server refused (an audit found nine):
    numbers past what a database column holds, an empty form, a report without its body, token
    or a well-formed fingerprint. The schemathesis run (tests/test_schemathesis.py) checks the
    whole document; this checks the nine in the quick lane."""
    client = wiki.anonymous()
    spec = client.get("/openapi.json").json()
    largest = 2**63 - 1
    bounded = [
        ("get", "/api/v1/changes", "before"),
        ("get", "/api/v1/entries/{entry_id}/diff", "from"),
        ("get", "/api/v1/entries/{entry_id}/diff", "to"),
        ("get", "/api/v1/entries/{entry_id}/revisions/{number}", "number"),
        ("post", "/api/v1/entries/{entry_id}/revisions/{number}/restore", "number"),
    ]
    for method, path, name in bounded:
        schema = _parameter(_operation(spec, method, path), name)
        schema = next(s for s in schema.get("anyOf", [schema]) if s.get("type") == "integer")
        assert schema.get("maximum") == largest, (path, name, schema)
    # ...and a number past it is a plain 422 from validation, not a database error.
    too_large = client.get(f"/api/v1/changes?before={largest + 1}")
    assert too_large.status_code == 422 and "before" in too_large.text
    assert client.get(f"/api/v1/entries/first-entry/revisions/{largest + 1}").status_code == 422

    form = _operation(spec, "post", "/api/v1/match")["requestBody"]["content"]
    text = form["application/x-www-form-urlencoded"]["schema"]["properties"]["text"]
    assert text.get("pattern") == r"\S"

    report = _operation(spec, "post", "/api/v1/outcomes").get("requestBody")
    assert report is not None and report["required"], "the report's body is not documented"
    fields = report["content"]["application/json"]["schema"]
    assert {"fingerprint", "id", "worked", "answer_token"} <= set(fields["required"])
    assert fields["properties"]["answer_token"].get("minLength") == 1
    assert fields["properties"]["fingerprint"].get("pattern") == "^[0-9a-f]{16}$"
