"""Search that answers everyday titles, over the repository's entries on both engines: a
symptom asked in everyday words finds its entry first, intent words ("how to", "怎么办") rank
nothing, error text inside a sentence (English or Chinese around it) puts its entry first, and
a query that two or three entries fit alike says so, with what tells them apart."""

import re

import pytest

from app.matching.fragments import FragmentIndex
from app.matching.signature_tier import SignatureRecord
from app.search.intent import without_intent

STATE_DICT_KEYS = {"state-dict-key-mismatch", "state-dict-module-prefix"}


@pytest.fixture(scope="module")
def client(engine_client):
    return engine_client


@pytest.fixture(scope="module")
def search(client):
    return client.app.state.runtime.search


def api(client, query: str) -> dict:
    response = client.get("/api/v1/search", params={"q": query})
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(
    ("query", "entry"),
    [
        ("my loss is nan after a few steps", "loss-nan"),
        ("训练时 loss 变成 nan 怎么办", "loss-nan"),
        ("显存不足怎么办", "cuda-out-of-memory"),
    ],
)
def test_an_everyday_symptom_question_finds_its_entry_first(client, query, entry):
    assert api(client, query)["hits"][0]["id"] == entry


def test_intent_words_are_not_content():
    assert without_intent("how to freeze layers") == "freeze layers"
    assert without_intent("请问多卡训练卡住怎么解决") == "多卡训练卡住"
    assert without_intent("What's the difference between view and reshape") == (
        "the difference between view and reshape"
    )
    # Quoted text, fields and excluded words stay as typed; intent words alone are the query.
    assert without_intent('title:how "how to" -why') == 'title:how "how to" -why'
    assert without_intent("why") == "why"


@pytest.mark.parametrize("query", ["how to qqqqzzzz", "为什么 qqqqzzzz", "请问 qqqqzzzz 怎么办"])
def test_how_to_ranks_no_entry_for_saying_how_to(search, query):
    # Without intent words as content, only the word no entry holds is left: nothing found,
    # not the entries whose text says "how to" or "为什么".
    result = search.search(query)
    assert result.total == 0 and result.loose_total == 0, [h.id for h in result.hits]


def test_how_to_x_is_searched_as_x(search):
    asked = search.search("how to freeze layers")
    assert [h.id for h in asked.hits] == [h.id for h in search.search("freeze layers").hits]
    assert asked.query == "how to freeze layers"  # what the reader typed, shown as typed


@pytest.mark.parametrize(
    ("query", "entry"),
    [
        (
            "why do I get Expected all tensors to be on the same device, but found at least "
            "two devices",
            "tensor-cuda-not-inplace",
        ),
        ("Expected all tensors to be on the same device 怎么解决", "tensor-cuda-not-inplace"),
        (
            "训练时报错 view size is not compatible with input tensor's size and stride 怎么解决",
            "view-non-contiguous",
        ),
        (
            "CUDA error: an illegal memory access was encountered 是什么原因",
            "cuda-illegal-memory-access",
        ),
        ("训练时报错 RuntimeError: CUDA out of memory 怎么办", "cuda-out-of-memory"),
    ],
)
def test_an_error_inside_a_sentence_puts_its_entry_first(client, query, entry):
    body = api(client, query)
    assert body["matches"][0]["id"] == entry
    assert body["hits"][0]["id"] == entry
    page = client.get("/search", params={"q": query}).text
    assert "Read as an error" in page
    results = page.split('<p class="summary">', 1)[1]  # after the "Read as an error" block
    first = re.search(
        r'<ol class="hits">\s*<li>\s*<a class="title" href="/entries/([^"?]+)', results
    )
    assert first and first.group(1) == entry


def test_a_few_words_of_a_long_message_are_not_a_match():
    record = SignatureRecord(
        "load-map-location",
        0,
        "Attempting to deserialize object on a CUDA device",
        "RuntimeError: Attempting to deserialize object on a CUDA device but "
        "torch.cuda.is_available() is False. If you are running on a CPU-only machine, "
        "please use torch.load with map_location=torch.device('cpu') to map your storages "
        "to the CPU.",
        "RuntimeError",
    )
    index = FragmentIndex([record])
    assert index.matches("torch.cuda.is_available() is false") == []
    found = index.matches("为什么 Attempting to deserialize object on a CUDA device 报错")
    assert [m.entry_id for m in found] == ["load-map-location"]
    assert found[0].matched_text == "Attempting to deserialize object on a CUDA device"


def test_a_query_two_or_three_entries_fit_says_so_with_what_tells_them_apart(client):
    body = api(client, "Missing key(s) in state_dict")
    ambiguous = body["ambiguous"]
    assert ambiguous and ambiguous["message"].endswith("what tells them apart:")
    ids = [e["id"] for e in ambiguous["entries"]]
    assert 2 <= len(ids) <= 3 and set(ids) >= STATE_DICT_KEYS
    assert [h["id"] for h in body["hits"][: len(ids)]] == ids  # the same entries lead the hits
    for entry in ambiguous["entries"]:
        assert entry["words"] and entry["url"] == f"/entries/{entry['id']}"
        others = [e for e in ambiguous["entries"] if e is not entry]
        for word in entry["words"]:  # each word is its own: no other entry's title says it
            assert all(word not in e["title"].lower() for e in others)
    page = client.get("/search", params={"q": "Missing key(s) in state_dict"}).text
    block = page.split('<section class="ambiguous"', 1)[1].split("</section>", 1)[0]
    assert ambiguous["message"] in block
    for entry in ambiguous["entries"]:
        assert f'href="/entries/{entry["id"]}?h=' in block
        assert "Only this one says" in block


def test_ambiguity_is_read_from_the_scores(client):
    # No error text here: two entries score about alike and the rest fall well behind.
    body = api(client, "DataLoader is stuck with num_workers 4")
    assert body["matches"] == []
    assert {e["id"] for e in body["ambiguous"]["entries"]} == {
        "dataloader-num-workers-slow",
        "dataloader-poll-hang",
    }


@pytest.mark.parametrize(
    "query",
    ["CUDA out of memory", "view size is not compatible", "my loss is nan after a few steps"],
)
def test_a_query_with_one_answer_is_not_ambiguous(client, query):
    assert api(client, query)["ambiguous"] is None
