"""End to end: `pitfalls serve` in a fresh folder, as a team would start it, over real HTTP."""

import json
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from tests.conftest import get

pytestmark = pytest.mark.e2e


def search_json(base: str, query: str) -> dict:
    status, body = get(f"{base}/api/v1/search?q={urllib.parse.quote(query)}")
    assert status == 200, body
    return json.loads(body)


def test_fresh_clone_gets_a_database_an_index_and_every_entry(server):
    base, clone = server
    assert (clone / "data" / "pitfalls.db").is_file()
    assert (clone / "data" / "index" / "CURRENT").is_file()
    health = json.loads(get(base + "/api/v1/health")[1])
    assert health["entries"] == len(list((clone / "content").glob("*.md")))
    assert health["index"]["behind"] == 0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("num_batches_tracked", "state-dict-num-batches-tracked"),
        ("batches tracked", "state-dict-num-batches-tracked"),
        ("FloatTensor", "tensor-cuda-not-inplace"),
        ("显存", "cuda-out-of-memory"),
    ],
)
def test_must_show_queries_find_the_right_entry_first(server, query: str, expected: str):
    base, _ = server
    assert search_json(base, query)["hits"][0]["id"] == expected
    status, page = get(f"{base}/search?q={urllib.parse.quote(query)}")
    assert status == 200
    # A result's link carries the query (`?h=`), which the entry page marks.
    assert page.index(f'href="/entries/{expected}?h=') < page.index('<a class="title"') + 60


def test_a_typo_shows_the_corrected_results_and_offers_the_words_as_typed(server):
    base, _ = server
    corrected = search_json(base, "contigous")
    assert corrected["corrected_from"] == "contigous" and corrected["query"] == "contiguous"
    assert corrected["hits"][0]["id"] == "view-non-contiguous"
    _, page = get(f"{base}/search?q=contigous")
    assert "Showing results for <strong>contiguous</strong>" in page
    _, exact = get(f"{base}/search?q=contigous&exact=1")
    assert "Did you mean" in exact and ">contiguous</a>" in exact


def test_entry_page_and_static_files_are_served(server):
    base, _ = server
    status, page = get(base + "/entries/cuda-out-of-memory")
    assert status == 200 and "显存" in page
    assert get(base + "/static/style.css")[0] == 200
    assert get(base + "/static/pygments.css")[0] == 200


def test_match_api_and_cli_against_the_real_server(server):
    base, _ = server
    paste = "RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead."
    request = urllib.request.Request(
        base + "/api/v1/match",
        data=json.dumps({"text": paste}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["matches"][0]["id"] == "view-non-contiguous"
    cli = subprocess.run(
        [
            sys.executable,
            "-c",
            "from app.cli import main; main()",
            "match",
            "-",
            "--json",
            "--server",
            base,
        ],
        input=paste,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["matches"][0]["id"] == "view-non-contiguous"
