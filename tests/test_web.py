"""Pages and their JSON twins, through HTTP, over a fresh data dir with the real entries."""

import re

import pytest
from markupsafe import escape

from app.entry_details import fix_first

pytestmark = pytest.mark.both_databases


def test_health_reports_entries_sequence_and_index(shared_client):
    body = shared_client.get("/api/v1/health").json()
    assert body["status"] == "ok"
    assert body["entries"] >= 8
    assert body["change_seq"] == body["index"]["seq"] >= body["entries"]
    assert body["index"]["behind"] == 0 and body["index"]["age_seconds"] >= 0


def test_home_page_has_a_search_box_and_alternate_link(shared_client):
    response = shared_client.get("/")
    assert response.status_code == 200
    assert '<input id="q"' in response.text and 'action="/search"' in response.text
    assert (
        response.headers["link"] == '</api/v1/overview>; rel="alternate"; type="application/json"'
    )


def test_search_page_and_its_json_twin_show_the_same_hits(shared_client):
    page = shared_client.get("/search", params={"q": "batches tracked"})
    assert page.status_code == 200
    twin_url = re.search(
        r'<link rel="alternate" type="application/json" href="([^"]+)"', page.text
    ).group(1)
    assert twin_url.replace("&amp;", "&") == "/api/v1/search?q=batches+tracked"
    data = shared_client.get(twin_url.replace("&amp;", "&")).json()
    assert data["hits"][0]["id"] == "state-dict-num-batches-tracked"
    assert data["hits"][0]["url"] == "/entries/state-dict-num-batches-tracked"
    assert set(data) >= {"total", "hits", "facets", "suggestion"}
    links = re.findall(r'<a class="title" href="/entries/([^"?]+)\?h=batches%20tracked"', page.text)
    assert links == [hit["id"] for hit in data["hits"]]
    assert '<mark class="match' in page.text


def test_search_page_offers_the_suggestion(shared_client):
    page = shared_client.get("/search", params={"q": "contigous", "exact": "1"})
    assert 'Did you mean <a href="/search?q=contiguous">contiguous</a>?' in page.text
    corrected = shared_client.get("/search", params={"q": "contigous"})
    assert "Showing results for <strong>contiguous</strong>" in corrected.text


def test_search_values_are_escaped(shared_client):
    page = shared_client.get("/search", params={"q": "<script>alert(1)</script>"})
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text


def test_entry_page_and_json_twin(shared_client):
    page = shared_client.get("/entries/view-non-contiguous")
    assert page.status_code == 200
    assert "<h1>" in page.text and 'id="fix"' in page.text
    assert (
        page.headers["link"]
        == '</api/v1/entries/view-non-contiguous>; rel="alternate"; type="application/json"'
    )
    response = shared_client.get("/api/v1/entries/view-non-contiguous")
    data = response.json()
    assert response.headers["etag"] == f'"{data["revision"]}"'
    assert data["markdown"].startswith("---\nid: view-non-contiguous\n")
    assert data["signatures"]
    # The same body, its Fix section first (the fix on a reader's first screen).
    first, rest = fix_first(data["html"])
    assert first.startswith('<h2 id="fix">') and first in page.text and rest in page.text
    assert page.text.index('id="fix"') < page.text.index('id="what-you-see"')


def test_one_error_shape_for_the_api_and_a_page_for_people(shared_client):
    response = shared_client.get("/api/v1/entries/no-such-entry")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"status": 404, "message": "no entry with id 'no-such-entry'"}
    }
    bad = shared_client.get("/api/v1/search", params={"page": 0})
    assert bad.status_code == 422 and bad.json()["error"]["status"] == 422
    page = shared_client.get("/entries/no-such-entry")
    assert page.status_code == 404
    assert "There is no entry &#39;no-such-entry&#39;" in page.text
    assert shared_client.get("/nowhere").status_code == 404


def test_openapi_documents_the_api(shared_client):
    paths = shared_client.get("/openapi.json").json()["paths"]
    assert {
        "/api/v1/health",
        "/api/v1/search",
        "/api/v1/entries/{entry_id}",
        "/api/v1/match",
        "/api/v1/overview",
        "/api/v1/tags/{tag}",
    } <= set(paths)
    q = next(p for p in paths["/api/v1/search"]["get"]["parameters"] if p["name"] == "q")
    assert q["description"] and "batches tracked" in q["schema"]["examples"]
    match_body = paths["/api/v1/match"]["post"]["requestBody"]["content"]
    assert {"application/json", "text/plain"} <= set(match_body) and match_body["application/json"][
        "example"
    ]


def test_facet_links_keep_the_other_filter_and_toggle_their_own(shared_client):
    page = shared_client.get("/search", params={"q": "tensor", "kind": "error"}).text
    assert 'href="/search?kind=error&amp;q=tensor&amp;tag=shapes"' in page
    # Clicking the active kind clears it.
    assert re.search(r'href="/search\?q=tensor"\s+aria-current="true"', page)


def test_entry_page_shows_the_shipped_verification_on_first_start(shared_client):
    """content/verification.json holds what verify ran; a fresh data dir shows it (a snippet
    changed since, or never run, stays "not verified yet": tests/test_verification.py)."""
    page = shared_client.get("/entries/view-non-contiguous").text
    assert re.search(r"Verified on torch 2\.13\.0\S*, Python 3\.11\.\d+, \d{4}-\d\d-\d\d:", page)
    data = shared_client.get("/api/v1/entries/view-non-contiguous").json()
    assert data["verification"]["status"] == "verified"
    assert data["verification"]["torch_version"].startswith("2.13.0")


def test_entries_whose_snippets_need_a_gpu_say_so_and_not_yet_stays_off_the_first_screen(
    shared_client,
):
    """cuda-out-of-memory's snippets all declare `requires=cuda` and none has run: its first
    screen carries no "not verified" badge, the snippets section says they need a GPU. An entry
    with a CPU part verified and a GPU part skipped says which is which."""
    page = shared_client.get("/entries/cuda-out-of-memory").text
    head, rest = page.split('<div class="entry-layout">', 1)
    assert 'class="verified' not in head
    assert "Not run yet: these snippets need a GPU (requires cuda)" in rest
    data = shared_client.get("/api/v1/entries/cuda-out-of-memory").json()["verification"]
    assert (data["status"], data["skipped_need_gpu"]) == ("unverified", True)

    page = shared_client.get("/entries/pin-memory-cuda-tensor").text
    head = page.split('<div class="entry-layout">', 1)[0]
    assert re.search(r"Verified on CPU parts: torch 2\.13\.0\S*, Python 3\.11\.\d+, ", head)
    assert "1 passed; GPU parts need a GPU (1 snippet: requires cuda)" in head
    # A snippet skipped for another reason is not called a GPU part.
    data = shared_client.get("/api/v1/entries/view-non-contiguous").json()["verification"]
    assert data["skipped_need_gpu"] is False


PAGE_TYPES = [  # page, its JSON twin, the list of entries the page must show
    ("/", "/api/v1/overview", "recent"),
    ("/search?q=contiguous", "/api/v1/search?q=contiguous", "hits"),
    (
        "/search?q=tensor&kind=error&tag=shapes",
        "/api/v1/search?q=tensor&kind=error&tag=shapes",
        "hits",
    ),
    ("/entries/view-non-contiguous", "/api/v1/entries/view-non-contiguous", "related"),
    ("/tags/checkpoint", "/api/v1/tags/checkpoint", "entries"),
]


def test_every_page_type_links_its_json_twin_built_from_the_same_data(shared_client):
    for page_url, twin_url, listed in PAGE_TYPES:
        page = shared_client.get(page_url)
        assert page.status_code == 200, page_url
        assert page.headers["link"] == f'<{twin_url}>; rel="alternate"; type="application/json"'
        assert (
            f'<link rel="alternate" type="application/json" href="{twin_url.replace("&", "&amp;")}">'
            in page.text
        )
        twin = shared_client.get(twin_url)
        assert twin.status_code == 200 and twin.headers["content-type"] == "application/json"
        data = twin.json()
        # the page shows what the twin holds
        titles = [item["title"] for item in data[listed]]
        if "title" in data:
            titles.append(data["title"])
        missing = [t for t in titles if str(escape(t)) not in page.text]
        assert titles and not missing, (page_url, missing)
    overview = shared_client.get("/api/v1/overview").json()
    assert overview["entries"] >= 100 and sum(overview["kinds"].values()) == overview["entries"]


def test_tag_pages_and_missing_tags(shared_client):
    data = shared_client.get("/api/v1/tags/checkpoint").json()
    assert data["total"] == len(data["entries"]) > 1 and all(
        "checkpoint" in e["tags"] for e in data["entries"]
    )
    assert shared_client.get("/tags/no-such-tag").status_code == 404
    assert shared_client.get("/api/v1/tags/no-such-tag").json()["error"]["status"] == 404


def test_security_headers_and_no_inline_script(shared_client):
    for url in (
        "/",
        "/search?q=x",
        "/entries/view-non-contiguous",
        "/match",
        "/help",
        "/api/v1/health",
    ):
        response = shared_client.get(url)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
        assert not re.search(r"<script(?![^>]*\bsrc=)", response.text), (
            url
        )  # every script is a file
        assert " style=" not in response.text and " on" + "click=" not in response.text


def test_snippets_download_as_python_files(shared_client):
    entry = shared_client.get("/api/v1/entries/view-non-contiguous").json()
    response = shared_client.get("/entries/view-non-contiguous/snippets/0.py")
    assert response.status_code == 200
    assert (
        response.headers["content-disposition"]
        == 'attachment; filename="view-non-contiguous-fix-0.py"'
    )
    assert response.text == entry["snippets"][0]["code"]
    page = shared_client.get("/entries/view-non-contiguous").text
    assert 'href="/entries/view-non-contiguous/snippets/1.py" download' in page
    assert shared_client.get("/entries/view-non-contiguous/snippets/99.py").status_code == 404


def test_related_entries_show_their_titles(shared_client):
    data = shared_client.get("/api/v1/entries/view-non-contiguous").json()
    assert data["related"] and all(set(r) == {"id", "title", "url"} for r in data["related"])
    page = shared_client.get("/entries/view-non-contiguous").text
    assert f'<a href="{data["related"][0]["url"]}">' in page


def test_opensearch_help_favicon_and_zero_result_hint(shared_client):
    xml = shared_client.get("/opensearch.xml")
    assert xml.headers["content-type"].startswith("application/opensearchdescription+xml")
    assert "/search?q={searchTerms}" in xml.text
    assert shared_client.get("/static/favicon.svg").status_code == 200
    assert shared_client.get("/static/app.js").status_code == 200
    assert "Adding an entry" in shared_client.get("/help").text
    empty = shared_client.get("/search", params={"q": "zzqxqzz nothingmatches"}).text
    assert 'href="/match">paste the whole traceback</a>' in empty


def test_an_unexpected_error_gets_the_500_page_and_json(real_settings):
    from fastapi.testclient import TestClient

    from app.web import create_app

    app = create_app(real_settings)

    @app.get("/api/v1/boom")
    def boom():
        raise RuntimeError("kaboom")

    @app.get("/boom")
    def boom_page():
        raise RuntimeError("kaboom")

    with TestClient(app, raise_server_exceptions=False) as client:
        api = client.get("/api/v1/boom")
        assert api.status_code == 500
        assert api.json() == {
            "error": {
                "status": 500,
                "message": "Something went wrong on our side; the error was logged.",
            }
        }
        page = client.get("/boom")
        assert page.status_code == 500 and "Something went wrong on our side" in page.text
