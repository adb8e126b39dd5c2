"""Every page has a JSON twin: `.json` on its path, and `Accept: application/json` on the page.

The walk goes over the app's own route table, so a page added without a twin fails here; the
twin is checked against the API route it stands for (the same data), and a browser's Accept
header still gets the page.
"""

import re

import pytest
from fastapi.responses import HTMLResponse
from fastapi.testclient import TestClient

from app.web.middleware.twins import EXEMPT, TWINS, app_routes, prefers_json
from tests import test_wiki
from tests.test_wiki import Wiki

pytestmark = pytest.mark.both_databases

wiki = test_wiki.wiki  # the fixture: an app over three entries, with users and tokens

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# Routes outside /api that are not HTML pages, and what they are instead.
NOT_PAGES = {
    "/entries/{entry_id}/snippets/{position}.py": "a snippet as a Python file",
    "/opensearch.xml": "the OpenSearch description for browsers",
    "/changes.atom": "the Atom feed of recent changes",
    "/metrics": "Prometheus text",
    "/mcp": "the MCP transport for coding agents",
    "/outcomes": "a form's action (POST) that redirects to the entry page",
    "/logout": "a form's action (POST) that redirects home",
    "/tokens/{token_id}/revoke": "a form's action (POST) that redirects to /tokens",
    "/openapi.json": "JSON already: the API's description",
}
VALUES = {"entry_id": "first-entry", "tag": "tensor", "number": "2", "name": "rita"}
QUERIES = {
    "/search": "q=failure+number",
    "/entries": "sort=-updated&per_page=2",
    "/entries/{entry_id}/diff": "from=1&to=2",
    "/entries/new": "type=KeyError&message=missing+key",
}
PASTE = {"text": "RuntimeError: failure in second-entry number 7 happened"}


def _is_html(route) -> bool:
    response_class = getattr(route, "response_class", None)
    return isinstance(response_class, type) and issubclass(response_class, HTMLResponse)


def pages_without_twins(app) -> list[tuple[str, str]]:
    """(method, path) of every HTML route that has neither a twin nor a reason to have none,
    and of every other route outside the API that this module does not know."""
    twins = {(method, twin.page) for twin in TWINS for method in twin.methods}
    missing = []
    for route in app_routes(app):
        path, methods = getattr(route, "path", ""), getattr(route, "methods", None) or set()
        if not methods or path.startswith("/api/"):
            continue  # mounts (static files), and the API itself
        for method in sorted(methods - {"HEAD"}):
            if (method, path) in twins or (method, path) in EXEMPT:
                continue
            if _is_html(route) or path not in NOT_PAGES:
                missing.append((method, path))
    return missing


def twin_routes(app) -> list[tuple[str, str, str]]:
    """(method, page path, API path) of every HTML route with a twin, from the route table."""
    found = []
    for route in app_routes(app):
        path, methods = getattr(route, "path", ""), getattr(route, "methods", None) or set()
        if path.startswith("/api/") or not _is_html(route):
            continue
        for method in sorted(methods - {"HEAD"}):
            for twin in TWINS:
                if twin.page == path and method in twin.methods:
                    found.append((method, path, twin.api))
    return found


def _fill(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: VALUES[m.group(1)], template)


def _second_revision(wiki: Wiki) -> None:
    """first-entry gets a revision 2 (for the diff and revision pages)."""
    client = wiki.anonymous()
    doc = client.get("/api/v1/entries/first-entry").json()
    edited = client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": doc["markdown"].replace("Because.", "Because, twice."), "message": "m"},
        headers={**wiki.bearer("ci-bot"), "If-Match": '"1"'},
    )
    assert edited.status_code == 200


def _ask(client: TestClient, method: str, url: str, **kwargs):
    if method == "POST":
        return client.post(url, data=PASTE, **kwargs)
    return client.request(method, url, **kwargs)


def test_every_html_route_has_a_twin_or_a_reason(wiki: Wiki):
    assert pages_without_twins(wiki.app) == []
    for reason in (*EXEMPT.values(), *NOT_PAGES.values()):
        assert len(reason) > 10  # a reason, not a placeholder


def test_a_new_page_without_a_twin_is_caught(wiki: Wiki):
    """The walk is not vacuous: a page added without a twin shows up in it."""

    @wiki.app.get("/forgotten", response_class=HTMLResponse)
    def forgotten() -> str:
        return "<p>no twin</p>"

    try:
        assert pages_without_twins(wiki.app) == [("GET", "/forgotten")]
    finally:
        wiki.app.router.routes.pop()


def test_each_twin_answers_json_with_the_data_of_its_api_route(wiki: Wiki):
    _second_revision(wiki)
    ada = wiki.login("ada")  # an admin sees every page, the editor's and the admin's too
    routes = twin_routes(wiki.app)
    assert len(routes) >= 20, routes  # every page of the site; none slipped out of the walk
    for method, template, api_template in routes:
        query = QUERIES.get(template, "")
        path, api = _fill(template), _fill(api_template)
        suffix = ("/index" if path == "/" else path) + ".json"

        def with_query(p: str, query: str = query) -> str:
            return f"{p}?{query}" if query else p

        what = (method, template)

        page = _ask(ada, method, with_query(path), headers={"Accept": BROWSER_ACCEPT})
        assert page.status_code == 200, (what, page.status_code, page.text[:300])
        assert page.headers["content-type"].startswith("text/html"), what
        assert "Accept" in page.headers.get("vary", ""), what
        expected_link = f'<{with_query(api)}>; rel="alternate"; type="application/json"'
        assert page.headers.get("link") == expected_link, what

        direct = _ask(ada, method, with_query(api), headers={"X-CSRF-Token": "unused"})
        by_suffix = _ask(ada, method, with_query(suffix))
        by_accept = _ask(ada, method, with_query(path), headers={"Accept": "application/json"})
        for twin in (by_suffix, by_accept):
            assert twin.status_code == page.status_code, (what, twin.status_code, twin.text[:300])
            assert twin.headers["content-type"] == "application/json", what
        assert by_accept.headers.get("vary", "").count("Accept") == 1, what
        if template != "/login":  # logging in changes nothing; /api/v1/me is stable anyway
            assert by_suffix.json() == by_accept.json() == direct.json(), what


def test_home_is_at_both_json_names(wiki: Wiki):
    client = wiki.anonymous()
    home = client.get("/.json")
    assert home.status_code == 200 and home.json() == client.get("/index.json").json()
    assert home.json() == client.get("/api/v1/overview").json()


def test_twins_keep_the_pages_guards_and_the_json_error_shape(wiki: Wiki):
    client = wiki.anonymous()
    missing = client.get("/entries/no-such-entry.json")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/json"
    assert "no-such-entry" in missing.json()["error"]["message"]
    # The page sends an anonymous visitor to the login form; the twin says 401 in JSON.
    assert client.get("/admin", follow_redirects=False).status_code == 303
    refused = client.get("/admin.json")
    assert refused.status_code == 401 and refused.json()["error"]["status"] == 401
    rita = wiki.login("rita")
    assert rita.get("/admin", headers={"Accept": "application/json"}).status_code == 403
    assert rita.get("/entries/first-entry/edit.json").status_code == 403
    bad = client.get("/entries.json?per_page=1000")
    assert bad.status_code == 422 and "per_page" in bad.json()["error"]["message"]


@pytest.mark.parametrize(
    ("accept", "wants_json"),
    [
        ("application/json", True),
        ("application/json, text/html;q=0.9", True),
        ("application/json, */*", True),
        ("application/*", True),
        (BROWSER_ACCEPT, False),
        ("*/*", False),
        ("", False),
        ("text/html, application/json", False),
        ("application/json;q=0.5, text/html", False),
        ("application/json;q=0", False),
        ("text/*;q=0.5, application/json;q=0.8", True),
        ("application/json;q=nonsense", False),
    ],
)
def test_content_negotiation(accept: str, wants_json: bool):
    assert prefers_json(accept) is wants_json


def test_a_browser_gets_the_page_and_a_client_the_json(wiki: Wiki):
    client = wiki.anonymous()
    for accept in (BROWSER_ACCEPT, "*/*", None):
        headers = {"Accept": accept} if accept else {}
        page = client.get("/entries/first-entry", headers=headers)
        assert page.headers["content-type"].startswith("text/html"), accept
    twin = client.get("/entries/first-entry", headers={"Accept": "application/json"})
    assert twin.json()["id"] == "first-entry" and twin.headers["etag"] == '"1"'


def test_the_paste_twin_is_the_answer(wiki: Wiki):
    client = wiki.anonymous()
    answer = client.post("/match.json", data=PASTE).json()
    assert answer["known"] is True and answer["matches"][0]["id"] == "second-entry"
    assert answer == client.post("/api/v1/match", json=PASTE).json()
    empty = client.post("/match.json", data={"text": "  "})
    assert empty.status_code == 422 and "empty" in empty.json()["error"]["message"]
    form = client.get("/match.json").json()
    assert form["post_to"] == "/api/v1/match" and form["max_paste_bytes"] > 0


def test_the_help_twin_has_the_sections_and_the_endpoints(wiki: Wiki):
    help_json = wiki.anonymous().get("/help.json").json()
    headings = [s["heading"] for s in help_json["sections"]]
    assert "Searching" in headings
    assert all(s["id"] and (s["text"] or s["code"]) for s in help_json["sections"])
    assert any("pitfalls match" in code for s in help_json["sections"] for code in s["code"])
    routes = {(e["method"], e["path"]) for e in help_json["endpoints"]}
    assert {("GET", "/api/v1/entries"), ("POST", "/api/v1/match")} <= routes


def test_the_diff_twin(wiki: Wiki):
    _second_revision(wiki)
    diff = wiki.anonymous().get("/entries/first-entry/diff.json?from=1&to=2").json()
    assert diff["before"]["number"] == 1 and diff["after"]["number"] == 2
    assert "-Because.\n+Because, twice.\n" in diff["unified"]


# FastAPI deprecates its `root_path` argument, which create_app passes PITFALLS_ROOT_PATH to.
@pytest.mark.filterwarnings("ignore::fastapi.exceptions.FastAPIDeprecationWarning")
def test_under_a_sub_path_the_twin_and_its_link_keep_the_prefix(make_settings, content_dir):
    (content_dir / "first-entry.md").write_text(test_wiki.entry_text("first-entry"), "utf-8")
    from app.web import create_app

    settings = make_settings(content_dir, root_path="/kb")
    with TestClient(create_app(settings)) as client:
        page = client.get("/kb/entries/first-entry")
        assert page.status_code == 200
        assert page.headers["link"].startswith("</kb/api/v1/entries/first-entry>")
        twin = client.get("/kb/entries/first-entry.json")
        assert twin.status_code == 200 and twin.json()["id"] == "first-entry"
        missing = client.get("/kb/entries/nothing.json")
        assert missing.status_code == 404 and missing.json()["error"]["status"] == 404


# ---- the listing pages ---------------------------------------------------------------------


def test_all_entries_paged_sorted_and_filtered(wiki: Wiki):
    client = wiki.anonymous()
    doc = client.get("/api/v1/entries/second-entry").json()
    retitled = client.put(  # second-entry: last by title, and the newest change
        "/api/v1/entries/second-entry",
        json={
            "markdown": doc["markdown"].replace("title: A sample", "title: Zero"),
            "message": "t",
        },
        headers={**wiki.bearer("ci-bot"), "If-Match": '"1"'},
    )
    assert retitled.status_code == 200
    by_title = client.get("/api/v1/entries?per_page=2").json()
    assert [e["id"] for e in by_title["entries"]] == ["first-entry", "third-entry"]
    assert (by_title["total"], by_title["pages"], by_title["prev"]) == (3, 2, None)
    following = client.get(by_title["next"]).json()
    assert [e["id"] for e in following["entries"]] == ["second-entry"]
    assert following["next"] is None and following["prev"].endswith("page=1&per_page=2&sort=title")
    reverse = client.get("/api/v1/entries?sort=-title").json()["entries"]
    assert [e["id"] for e in reverse] == ["second-entry", "first-entry", "third-entry"]
    newest = client.get("/api/v1/entries?sort=-updated").json()["entries"]
    assert newest[0]["id"] == "second-entry"
    oldest = client.get("/api/v1/entries?sort=updated").json()["entries"]
    assert oldest[-1]["id"] == "second-entry"
    assert client.get("/api/v1/entries?kind=howto").json()["total"] == 0
    assert client.get("/api/v1/entries?kind=error").json()["kinds"] == {"error": 3}
    past = client.get("/api/v1/entries?page=9").json()
    assert past["entries"] == [] and past["prev"] is not None
    for bad in ("per_page=0", "per_page=101", "page=0", "sort=id"):
        assert client.get(f"/api/v1/entries?{bad}").status_code == 422, bad
    page = client.get("/entries?per_page=2&sort=-updated").text
    assert 'rel="next" href="/entries?page=2&amp;per_page=2&amp;sort=-updated"' in page
    rows = re.findall(r'<tr><td><a href="/entries/([a-z-]+)"', page)
    assert len(rows) == 2 and rows[0] == "second-entry"


def test_tags_page_counts_and_links(wiki: Wiki):
    client = wiki.anonymous()
    tags = client.get("/api/v1/tags").json()
    assert tags == {"total": 1, "tags": [{"tag": "tensor", "count": 3, "url": "/tags/tensor"}]}
    page = client.get("/tags")
    assert (
        page.status_code == 200 and 'href="/tags/tensor">tensor <span class="count">3' in page.text
    )
