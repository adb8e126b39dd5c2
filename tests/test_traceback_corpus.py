"""Pastes made by running real tools in every format: the answer (both tiers) must name the
right entry, or nothing."""

import json
from pathlib import Path

import pytest

from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
from app.matching.paste_matcher import PasteMatcher
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT

CORPUS = Path(__file__).parent / "data" / "tracebacks"
EXPECTED = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def answers() -> dict[str, str | None]:
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    matcher = PasteMatcher.build(signature_records(docs), entry_texts(docs))  # both tiers
    out = {}
    for name in EXPECTED:
        text = (CORPUS / name).read_bytes().decode("utf-8", errors="replace")
        matches = matcher.match(parse_traceback(text)).matches
        out[name] = matches[0].entry_id if matches else None
    return out


def test_corpus_is_big_and_varied_enough():
    positives = [c for c in EXPECTED.values() if c["expected"]]
    negatives = [c for c in EXPECTED.values() if not c["expected"]]
    assert len(positives) >= 60 and len(negatives) >= 10
    assert len({c["format"] for c in EXPECTED.values()}) >= 12
    assert all((CORPUS / name).is_file() for name in EXPECTED)


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_top_1_accuracy_on_positives_is_at_least_95_percent(answers):
    positives = {n: c["expected"] for n, c in EXPECTED.items() if c["expected"]}
    wrong = {n: (want, answers[n]) for n, want in positives.items() if answers[n] != want}
    accuracy = 1 - len(wrong) / len(positives)
    assert accuracy >= 0.95, f"top-1 {accuracy:.1%}; wrong: {json.dumps(wrong, indent=1)}"


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_negatives_get_no_confident_match(answers):
    claimed = {n: answers[n] for n, c in EXPECTED.items() if not c["expected"] and answers[n]}
    assert claimed == {}
