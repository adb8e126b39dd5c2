"""Search results that mean something, over the repository's entries on both engines: an
everyday query returns the handful of entries about it (the rest are counted as loosely
related), a filter is never relaxed away, and a snippet is a sentence of the entry, never its
alias list and never a fragment twice."""

import html
import re

import pytest

from app.search.query import has_cjk

EVERYDAY = {
    "CUDA out of memory": "cuda-out-of-memory",
    "how to freeze layers": None,  # several entries fit; the count is what is checked
    "RuntimeError: CUDA error: device-side assert triggered": "cuda-device-side-assert",
}
QUERIES = [
    "CUDA out of memory",
    "how to freeze layers",
    "segmentation fault",
    "DataLoader hangs with num_workers",
    "loss becomes nan with mixed precision",
    "Expected all tensors to be on the same device",
    "load state_dict missing keys",
    "显存不足 怎么办",
    "多卡训练卡住",
    "段错误",
    "模型保存 加载",
    "DataLoader 卡住",
    "梯度爆炸",
    "学习率 调整",
]


@pytest.fixture(scope="module")
def client(engine_client):
    return engine_client


@pytest.fixture(scope="module")
def search(client):
    return client.app.state.runtime.search


@pytest.mark.parametrize("query", list(EVERYDAY))
def test_an_everyday_query_returns_a_handful(search, query):
    result = search.search(query)
    assert 1 <= result.total <= 15, (query, result.total)
    assert len(result.loose) <= 10
    if not query.startswith("how to"):  # "how to" is intent, no word to share (test_search_intent)
        assert result.loose_total > 0
        assert result.total + result.loose_total > 100  # the rest share a common word only
    if EVERYDAY[query]:
        assert result.hits[0].id == EVERYDAY[query]
    shown = {h.id for h in result.hits}
    assert not shown & {h.id for h in result.loose}


def test_the_page_folds_the_loosely_related_and_the_api_lists_them(client):
    body = client.get("/api/v1/search", params={"q": "CUDA out of memory"}).json()
    assert body["total"] == len(body["hits"]) <= 15
    assert body["loose_total"] > 0 and body["loose"][0]["url"].startswith("/entries/")
    page = client.get("/search", params={"q": "CUDA out of memory"}).text
    assert f"{body['loose_total']} more loosely related</summary>" in page
    assert re.search(r"<details class=\"loose\">", page)
    assert 'href="/entries/cuda-out-of-memory?h=CUDA%20out%20of%20memory"' in page


def test_filters_that_no_entry_has_together_find_nothing_and_say_so(search, client):
    result = search.search("tag:cuda kind:hang")
    assert result.total == 0 and result.hits == [] and result.loose_total == 0
    assert result.filter_note is not None
    assert result.filter_note.message == "No entry has tag:cuda and kind:hang together."
    without = {w.label: w for w in result.filter_note.without}
    assert without["tag:cuda"].query == "kind:hang" and without["tag:cuda"].total > 0
    assert without["kind:hang"].query == "tag:cuda" and without["kind:hang"].total > 0
    # Words that need relaxing still never break a filter.
    relaxed = search.search("tag:cuda freeze zzzunknownword layers", limit=50)
    assert all("cuda" in h.tags for h in relaxed.hits + relaxed.loose)
    # The same for the parameters, and a filter that matches nothing alone.
    param = search.search("hang", kind="error", tag="zzznotag")
    assert param.total == 0 and param.filter_note.message == "No entry has tag:zzznotag."
    body = client.get("/api/v1/search", params={"q": "tag:cuda kind:hang"}).json()
    assert body["total"] == 0 and body["filter_note"]["message"].startswith("No entry has")
    page = client.get("/search", params={"q": "tag:cuda kind:hang"}).text
    assert "No entry has tag:cuda and kind:hang together." in page
    assert 'href="/search?q=kind%3Ahang">without tag:cuda</a>' in page


def _plain(snippet: str) -> str:
    return html.unescape(re.sub(r"</?mark[^>]*>", "", snippet))


@pytest.fixture(scope="module")
def aliases(search):
    from sqlmodel import Session, select

    from app.models import Entry

    with Session(search.engine) as session:
        return {e.id: (e.title, e.aliases) for e in session.exec(select(Entry)).all()}


@pytest.fixture(scope="module")
def snippets(search, aliases) -> list[tuple[str, str, str]]:
    """(query, entry, snippet) of the first page of every entry's title and of QUERIES."""
    found = []
    for query in [title for title, _ in aliases.values()] + QUERIES:
        for hit in search.search(query, limit=10, facets=False).hits:
            if hit.highlights:
                found.append((query, hit.id, hit.highlights))
    return found


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_no_snippet_is_an_alias_list(snippets, aliases):
    assert len(snippets) >= len(aliases)  # at least a snippet a title, most are the entry itself
    for query, entry, snippet in snippets:
        text = _plain(snippet)
        listed = " ; ".join(aliases[entry][1])
        assert " ; " not in text and text not in listed, (query, entry, text)


def test_a_chinese_query_gets_a_chinese_sentence_where_the_entry_has_one(search):
    for query in ("显存不足 怎么办", "段错误", "多卡训练卡住"):
        first = search.search(query).hits[0]
        assert has_cjk(_plain(first.highlights)), (query, first.highlights)
        assert "<mark" in first.highlights


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_no_snippet_repeats_a_fragment(snippets):
    for query, entry, snippet in snippets:
        text = _plain(snippet)
        pieces = [p.strip() for p in text.split(" … ")]
        assert len(pieces) == len(set(pieces)), (query, entry, text)
        words = text.split()
        runs = [" ".join(words[i : i + 5]) for i in range(len(words) - 4)]
        assert len(runs) == len(set(runs)), (query, entry, text)


def test_segfault_finds_the_segfault_entries(search):
    for query in ("segfault", "segmentation fault", "段错误"):
        result = search.search(query)
        assert result.hits[0].id == "segmentation-fault"
    everything = search.search("segfault")
    found = {h.id for h in everything.hits + everything.loose}
    assert {"segmentation-fault", "dataloader-worker-killed"} <= found
