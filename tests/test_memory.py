"""The memory tier: labelled pastes vote for the entries that explained pastes like this one.

A wording that no entry's text holds still finds its entry when remembered pastes of that
wording were labelled with it; a paste's own thread never votes for it; pastes that no entry
explained count against every claim; the shipped file holds the same rows every time it is
written from the same corpus.
"""

import pytest

from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
from app.matching.calibration import Model, load_model
from app.matching.likely import FEATURES, Query
from app.matching.memory import PasteMemory, Remembered, read_memory, votes, write_memory
from app.matching.paste_matcher import PasteMatcher
from app.matching.signature_tier import SignatureMatcher
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT

# A wording of the error no entry holds (a wrapper's re-raise, say), and the label a team gave it.
WORDING = "ZorbLayoutError: the quux wibble refuses to fold before the frobnication pass"
ENTRY = "view-non-contiguous"


def _remembered(thread: str, label: str | None, message: str = WORDING) -> Remembered:
    return Remembered.of(Query(message, "ZorbLayoutError"), source=thread, label=label)


@pytest.fixture(scope="module")
def entries():
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    return signature_records(docs), entry_texts(docs)


# A model that weighs the memory's votes (the shipped one does not yet: docs/accuracy.md).
MODEL = Model(
    weights=(0.0,) * (len(FEATURES) - 3) + (1.0, 3.0, -3.0),
    bias=-2.0,
    threshold=0.99,
    features=FEATURES,
)


def _matcher(entries, memory, model: Model = MODEL) -> PasteMatcher:
    records, texts = entries
    return PasteMatcher(SignatureMatcher(records), texts, model, memory=memory)


PASTE = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 12, in <module>\n'
    "    out = fold_all(x)\n"
    f"{WORDING}\n"
)


def test_remembered_pastes_make_their_entry_a_candidate_that_the_text_alone_does_not(entries):
    memory = PasteMemory([_remembered(f"https://example.org/t/{n}", ENTRY) for n in range(4)])
    parsed = parse_traceback(PASTE)
    alone = _matcher(entries, None).match(parsed)
    assert ENTRY not in [c.entry_id for c in alone.candidates]

    helped = _matcher(entries, memory).match(parsed)
    found = {c.entry_id: c for c in helped.candidates}
    assert ENTRY in found
    features = found[ENTRY].features
    assert features["memory_votes"] == pytest.approx(1.0)
    assert features["memory_best"] > 0.7 and features["memory_negative"] == 0.0
    # The model weighs the votes: the same candidate without them is less likely.
    model = _matcher(entries, memory).model
    unvoted = {**features, "memory_votes": 0.0, "memory_best": 0.0}
    assert model.confidence(features) > model.confidence(unvoted)


def test_a_pastes_own_thread_never_votes_for_it(entries):
    thread = "https://github.com/someone/project/issues/7"
    memory = PasteMemory([_remembered(thread, ENTRY)])
    parsed = parse_traceback(PASTE)
    excluded = _matcher(entries, memory).match(parsed, exclude_thread=" " + thread.upper())
    assert ENTRY not in [c.entry_id for c in excluded.candidates]
    assert memory.neighbours(Query(WORDING, "ZorbLayoutError"), exclude_thread=thread) == []


def test_pastes_no_entry_explained_weigh_against_every_claim():
    memory = PasteMemory(
        [_remembered("https://example.org/a", ENTRY), _remembered("https://example.org/b", None)]
    )
    said = votes(memory.neighbours(Query(WORDING, "ZorbLayoutError")))
    assert said.by_entry[ENTRY][0] == pytest.approx(0.5)
    assert said.features("some-other-entry")["memory_negative"] > 0.9
    assert said.features(ENTRY)["memory_negative"] == said.negative
    # An entry since removed is no vote, yet its neighbour still weighs in the total.
    assert votes(memory.neighbours(Query(WORDING, "ZorbLayoutError")), known=set()).by_entry == {}


def test_unrelated_words_find_no_neighbour_and_common_words_propose_nothing():
    memory = PasteMemory([_remembered(f"https://example.org/{n}", ENTRY) for n in range(30)])
    assert memory.neighbours(Query("completely different words here", None)) == []
    # A word every remembered paste holds proposes no neighbour by itself.
    assert memory.neighbours(Query("zorb", None)) == []


def test_the_memory_file_is_the_same_bytes_for_the_same_pastes(tmp_path):
    items = [_remembered(f"https://example.org/{n}", ENTRY if n % 2 else None) for n in range(5)]
    first, second = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    write_memory(items, first)
    write_memory(list(reversed(items)), second)
    assert first.read_bytes() == second.read_bytes()
    assert sorted(read_memory(first), key=repr) == sorted(items, key=repr)


def test_a_model_fitted_without_the_memory_never_consults_it(entries):
    """The shipped model names no memory feature: the memory is then a bystander, and the
    answer is the one the matcher gave before the memory tier existed."""
    memory = PasteMemory([_remembered(f"https://example.org/t/{n}", ENTRY) for n in range(4)])
    shipped = load_model()
    matcher = _matcher(entries, memory, shipped)
    assert not matcher.uses_memory
    result = matcher.match(parse_traceback(PASTE))
    assert ENTRY not in [c.entry_id for c in result.candidates]
    assert all("memory_votes" not in c.features for c in result.candidates)
