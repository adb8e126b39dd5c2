"""Pages and their JSON twins, through HTTP, over a fresh data dir with the real entries."""

import re


def test_health_reports_entries_sequence_and_index(real_client):
    body = real_client.get("/api/v1/health").json()
    assert body["status"] == "ok"
    assert body["entries"] >= 8
    assert body["change_seq"] == body["index"]["seq"] >= body["entries"]
    assert body["index"]["behind"] == 0 and body["index"]["age_seconds"] >= 0


def test_home_page_has_a_search_box_and_alternate_link(real_client):
    response = real_client.get("/")
    assert response.status_code == 200
    assert '<input id="q"' in response.text and 'action="/search"' in response.text
    assert response.headers["link"] == '</api/v1/health>; rel="alternate"; type="application/json"'


def test_search_page_and_its_json_twin_show_the_same_hits(real_client):
    page = real_client.get("/search", params={"q": "batches tracked"})
    assert page.status_code == 200
    twin_url = re.search(
        r'<link rel="alternate" type="application/json" href="([^"]+)"', page.text
    ).group(1)
    assert twin_url.replace("&amp;", "&") == "/api/v1/search?q=batches+tracked"
    data = real_client.get(twin_url.replace("&amp;", "&")).json()
    assert data["hits"][0]["id"] == "state-dict-num-batches-tracked"
    assert data["hits"][0]["url"] == "/entries/state-dict-num-batches-tracked"
    assert set(data) >= {"total", "hits", "facets", "suggestion"}
    links = re.findall(r'<a class="title" href="/entries/([^"]+)"', page.text)
    assert links == [hit["id"] for hit in data["hits"]]
    assert '<mark class="match' in page.text


def test_search_page_offers_the_suggestion(real_client):
    page = real_client.get("/search", params={"q": "contigous"})
    assert 'Did you mean <a href="/search?q=contiguous">contiguous</a>?' in page.text


def test_search_values_are_escaped(real_client):
    page = real_client.get("/search", params={"q": "<script>alert(1)</script>"})
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text


def test_entry_page_and_json_twin(real_client):
    page = real_client.get("/entries/view-non-contiguous")
    assert page.status_code == 200
    assert "<h1>" in page.text and 'id="fix"' in page.text
    assert (
        page.headers["link"]
        == '</api/v1/entries/view-non-contiguous>; rel="alternate"; type="application/json"'
    )
    response = real_client.get("/api/v1/entries/view-non-contiguous")
    data = response.json()
    assert response.headers["etag"] == f'"{data["revision"]}"'
    assert data["markdown"].startswith("---\nid: view-non-contiguous\n")
    assert data["signatures"] and data["html"] in page.text


def test_one_error_shape_for_the_api_and_a_page_for_people(real_client):
    response = real_client.get("/api/v1/entries/no-such-entry")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"status": 404, "message": "no entry with id 'no-such-entry'"}
    }
    bad = real_client.get("/api/v1/search", params={"page": 0})
    assert bad.status_code == 422 and bad.json()["error"]["status"] == 422
    page = real_client.get("/entries/no-such-entry")
    assert page.status_code == 404
    assert "There is no entry &#39;no-such-entry&#39;" in page.text
    assert real_client.get("/nowhere").status_code == 404


def test_openapi_documents_the_api(real_client):
    paths = real_client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/health", "/api/v1/search", "/api/v1/entries/{entry_id}"} <= set(paths)


def test_facet_links_keep_the_other_filter_and_toggle_their_own(real_client):
    page = real_client.get("/search", params={"q": "tensor", "kind": "error"}).text
    assert 'href="/search?kind=error&amp;q=tensor&amp;tag=shapes"' in page
    # Clicking the active kind clears it.
    assert re.search(r'href="/search\?q=tensor"\s+aria-current="true"', page)


def test_entry_page_says_when_snippets_are_not_verified_yet(real_client):
    page = real_client.get("/entries/view-non-contiguous").text
    assert "Snippets not verified yet" in page
    data = real_client.get("/api/v1/entries/view-non-contiguous").json()
    assert data["verification"]["status"] == "unverified"
