"""Accuracy on real pastes copied from public threads: fitted on one half, reported on the other.

The corpus (tests/data/real-pastes/) holds pastes nobody here wrote, each with its source and the
entry that explains it, or none. The likely tier's model is fitted on half A and measured on half
B, then the reverse; a figure measured on the half it was fitted on is never asserted.
"""

import json
import re
from pathlib import Path

import pytest

from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
from app.matching.calibration import Model, load_model
from app.matching.evaluation import Outcome, fit_model, load_corpus, report, run, with_model
from app.matching.likely import FEATURES
from app.matching.memory import read_memory, thread_key
from app.matching.paste_matcher import PasteMatcher
from app.matching.signature_tier import SignatureMatcher
from tests.conftest import REPO_CONTENT

CORPUS = Path(__file__).parent / "data" / "real-pastes"
FORMATS = {
    "message", "traceback", "fragment", "log", "prose", "markdown", "notebook", "torchrun",
    "warning", "cpp", "windows", "pdb", "chinese",
}  # fmt: skip
# Held at where the figures stand, about a point below (today 85.3 % / 85.6 % top-1 and 90.5 % /
# 86.5 % negatives with no match on the two held-out halves, against a goal of 97 % and 95 %: see
# bench/calibration.py), so that a change cannot make them worse unnoticed. They fell as blind
# batches joined, mostly prose about silent errors: from 93.7 % / 91.7 % and 87.9 % / 90.2 % when
# g1 and g2 did (measured fresh at 49.4 % top-1, 78.1 % negatives), and from 90.3 % / 89.8 % and
# 86.6 % / 83.3 % when h1 and h2 did (fresh: 62.9 % and 83.9 %); i1 and i2 measured 84.3 % and
# 80.6 % fresh, j1 and j2 86.4 % and 87.5 %, k1 and k2 83.0 % and 90.6 %, l1 and l2 64.4 % and
# 53.1 %, m1 and m2 63.2 % and 86.2 % (more than half of l's and m's positives quote no error).
# The negatives' floor went from 0.87 to 0.85 when 13 of them, left unclaimed before, became
# positives of two new entries (invalid device ordinal, GradScaler's no inf checks).
# On pastes that hold an error the held-out top-1 is 96.6 %; an expert given the paste alone gets
# 89.2 % / 89.4 % on a random 196 of them (tests/data/real-pastes-paste-only-reader.json).
# Then 0.85 to 0.84 when 45 more, all unclaimed before, became positives of new entries
# (segmentation faults, renamed state_dict keys, float16 on the CPU, Windows DLLs, torchvision
# skew, BCE target size, DataLoader fds, meta tensors, fp16 unscale, RNN input_size, too-old
# torch APIs, duplicate OpenMP, ...): half B is at 84.1 % of 207 negatives, half A at 86.6 %;
# top-1 85.1 % / 88.4 %.
HELD_OUT_TOP1_FLOOR = 0.83
HELD_OUT_NEGATIVES_FLOOR = 0.84


@pytest.fixture(scope="module")
def matcher() -> PasteMatcher:
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    neutral = Model(weights=(0.0,) * len(FEATURES), bias=0.0, threshold=1.01)
    return PasteMatcher(SignatureMatcher(signature_records(docs)), entry_texts(docs), neutral)


@pytest.fixture(scope="module")
def cases():
    return load_corpus(CORPUS)


@pytest.fixture(scope="module")
def held_out(matcher, cases) -> dict[str, list[Outcome]]:
    out = {}
    for fit_half, test_half in (("A", "B"), ("B", "A")):
        model = fit_model(run(matcher, [c for c in cases if c.half == fit_half]))
        out[test_half] = run(with_model(matcher, model), [c for c in cases if c.half == test_half])
    return out


def test_the_corpus_is_real_big_and_labelled(cases):
    ids = {p.stem for p in REPO_CONTENT.glob("*.md")}
    positives = [c for c in cases if c.expected]
    negatives = [c for c in cases if not c.expected]
    assert len(cases) >= 300 and len(negatives) >= 60
    assert sum(1 for c in negatives if c.negative == "hard") >= 30
    assert all(c.expected in ids for c in positives), "a label names no entry"
    assert all(c.source.startswith(("https://", "http://")) or "#" in c.source for c in cases)
    assert len({c.source for c in cases}) == len(cases), "one paste per thread"
    assert {c.format for c in cases} <= FORMATS
    assert all(c.text.strip() for c in cases)
    for manifest in CORPUS.glob("*.json"):
        for item in json.loads(manifest.read_text(encoding="utf-8")):
            assert set(item) >= {"file", "source", "expected", "negative", "format"}


def test_both_halves_hold_positives_and_negatives(cases):
    for half in "AB":
        inside = [c for c in cases if c.half == half]
        assert sum(1 for c in inside if c.expected) >= 100
        assert sum(1 for c in inside if not c.expected) >= 20


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
@pytest.mark.parametrize("half", ["A", "B"])
def test_held_out_accuracy_stays_above_its_floor(held_out, half):
    rep = report(held_out[half])
    wrong = json.dumps(rep.wrong, indent=1)
    assert rep.top1 >= HELD_OUT_TOP1_FLOOR, f"half {half}: top-1 {rep.top1:.1%}; {wrong}"
    assert rep.negatives_clear_share >= HELD_OUT_NEGATIVES_FLOOR, (
        f"half {half}: negatives with no match {rep.negatives_clear_share:.1%}; {wrong}"
    )


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_the_likely_tier_adds_right_answers_on_held_out_pastes(matcher, cases, held_out):
    signature_only = report(run(matcher, cases))
    both = report(held_out["A"] + held_out["B"])
    assert both.positives_right > signature_only.positives_right
    assert both.by_tier.get("likely", 0) > 0


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_held_out_confidence_is_calibrated_where_it_claims(held_out):
    """Among held-out pastes the likely tier claims, most are right, and higher buckets are
    right more often than lower ones."""
    scored = [o.top_likely for o in held_out["A"] + held_out["B"] if o.top_likely]
    claimed = [ok for c, ok in scored if c >= 0.6]
    unclaimed = [ok for c, ok in scored if c < 0.2]
    assert claimed and sum(claimed) / len(claimed) >= 0.7
    assert unclaimed and sum(unclaimed) / len(unclaimed) <= 0.4


def test_the_shipped_model_is_fitted_on_this_corpus(cases):
    """`bench/calibration.py --write` fits it on every paste; refit when the corpus grows."""
    shipped = load_model()
    assert shipped.fitted_on.startswith(f"{len(cases)} real pastes")
    assert 0.2 < shipped.threshold < 0.95


def test_the_shipped_memory_holds_this_corpus(cases):
    """`bench/calibration.py --write` writes it with the model: every labelled paste (as its
    normalized query, never its text), each with its label and its thread's digest."""
    remembered = read_memory()
    labels = {(thread_key(c.source), c.expected) for c in cases}
    assert {(r.thread, r.label) for r in remembered} <= labels
    assert len(remembered) >= 0.99 * len(cases)
    # Normalized: the users' paths and addresses are placeholders.
    for r in remembered:
        assert not re.search(r"/home/\w|C:\\Users\\\w|0x[0-9a-fA-F]{8,}", r.message), r.message
