"""The matcher: one set pass, confirmed hits, conditions, ranking, and no silent failure."""

from pathlib import Path

import pytest
import re2

from app.checker import collect_entry_files, load_entry_files, signature_records
from app.matching import (
    KNOWN_MATCH_THRESHOLD,
    SignatureMatcher,
    SignatureRecord,
    known_matches,
    match_paste,
)
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT


def record(
    entry_id: str, message: str, exception: str | None = None, frame: str | None = None
) -> SignatureRecord:
    return SignatureRecord(entry_id, 0, message, message, exception, frame)


@pytest.fixture(scope="module")
def content_matcher() -> SignatureMatcher:
    return SignatureMatcher(
        signature_records(load_entry_files(collect_entry_files([REPO_CONTENT])))
    )


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_every_signature_example_read_as_a_paste_is_matched_to_its_own_entry_first(content_matcher):
    failures = []
    for rec in content_matcher.records:
        if rec.context:
            continue  # needs its context besides the message: see test_likely
        matches = known_matches(match_paste(content_matcher, parse_traceback(rec.example)))
        top = matches[0].entry_id if matches else None
        if top != rec.entry_id:
            failures.append(f"{rec.entry_id}[{rec.position}] -> {top}: {rec.example[:80]}")
    assert failures == []


def test_captures_and_span_are_quoted_back(content_matcher):
    paste = 'Traceback (most recent call last):\n  File "t.py", line 9, in <module>\nRuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "conv1.weight". \n\tUnexpected key(s) in state_dict: "module.conv1.weight". \n'
    (best, *_) = known_matches(match_paste(content_matcher, parse_traceback(paste)))
    assert best.entry_id == "state-dict-module-prefix"
    assert "module.conv1.weight" in best.hit.captures.values()
    assert best.matched_text in best.searched_text and best.matched_in == "final"


def test_final_exception_beats_an_earlier_one_in_the_chain():
    matcher = SignatureMatcher(
        [
            record("first", "first failure happened here"),
            record("second", "second failure happened here"),
        ]
    )
    paste = "Traceback (most recent call last):\nValueError: first failure happened here\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\nValueError: second failure happened here\n"
    matches = match_paste(matcher, parse_traceback(paste))
    assert [m.entry_id for m in matches] == ["second", "first"]
    assert matches[0].matched_in == "final" and matches[1].matched_in == "cause"
    assert matches[0].confidence > matches[1].confidence


def test_agreeing_type_and_longer_pattern_rank_higher():
    matcher = SignatureMatcher(
        [
            record("generic", "shapes cannot be multiplied", "RuntimeError"),
            record("typed", "shapes cannot be multiplied", "ValueError"),
            record(
                "specific",
                r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d+x\d+)",
                "ValueError",
            ),
        ]
    )
    matches = match_paste(
        matcher,
        parse_traceback(
            "ValueError: mat1 and mat2 shapes cannot be multiplied (16x1350 and 1000x10)"
        ),
    )
    assert [m.entry_id for m in matches] == ["specific", "typed", "generic"]
    assert matches[0].hit.captures == {"a": "16x1350"}


def test_short_pattern_needs_its_exception_type():
    matcher = SignatureMatcher([record("argparse", r"^2\z", "SystemExit")])
    assert match_paste(matcher, parse_traceback("SystemExit: 2")) != []
    assert match_paste(matcher, parse_traceback("KeyError: 2")) == []


def test_frame_condition_is_applied():
    matcher = SignatureMatcher(
        [
            record(
                "torchload",
                "codec can't decode byte",
                "UnicodeDecodeError",
                r"torch[/\\]serialization\.py",
            )
        ]
    )
    message = "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 1: invalid continuation byte"
    from_torch = f'Traceback (most recent call last):\n  File "/usr/lib/python3.11/site-packages/torch/serialization.py", line 1, in load\n{message}\n'
    elsewhere = f'Traceback (most recent call last):\n  File "/home/u/read_csv.py", line 3, in <module>\n{message}\n'
    assert [m.entry_id for m in match_paste(matcher, parse_traceback(from_torch))] == ["torchload"]
    assert match_paste(matcher, parse_traceback(elsewhere)) == []


def test_an_entry_whose_context_the_paste_holds_comes_before_one_with_no_condition():
    message = "Can't pickle local object 'Encoder.__init__.<locals>.<lambda>'"
    plain = SignatureRecord("workers", 0, "Can't pickle local object", message, "AttributeError")
    saving = SignatureRecord(
        "saving", 0, "Can't pickle local object", message, "AttributeError", None, r"torch\.save"
    )
    matcher = SignatureMatcher([plain, saving])
    saved = f"torch.save(model, 'm.pt')\nAttributeError: {message}\n"
    loaded = f"for batch in loader:\nAttributeError: {message}\n"
    assert [m.entry_id for m in match_paste(matcher, parse_traceback(saved))] == [
        "saving",
        "workers",
    ]
    assert [m.entry_id for m in match_paste(matcher, parse_traceback(loaded))] == ["workers"]


def test_text_without_an_exception_line_is_searched_too(content_matcher):
    paste = "/pytorch/aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
    (best, *_) = known_matches(match_paste(content_matcher, parse_traceback(paste)))
    assert (best.entry_id, best.matched_in) == ("cuda-device-side-assert", "text")


def test_negatives_get_no_confident_match(content_matcher):
    for paste in (
        "Traceback (most recent call last):\n  File \"p.py\", line 3\nKeyError: 'price'\n",
        "ValueError: operands could not be broadcast together with shapes (3,) (4,)\n",
        "ConnectionRefusedError: [Errno 111] Connection refused\n",
        "just some text with no error in it",
        "",
    ):
        assert known_matches(match_paste(content_matcher, parse_traceback(paste))) == [], paste


def test_a_set_that_fails_at_match_time_falls_back_and_still_finds_the_match():
    matcher = SignatureMatcher(
        [record("a", "alpha (?P<n>\\d+)"), record("b", "beta")], chunk_size=1
    )
    # RE2 reports a DFA that ran out of memory by returning no index at all, not even the
    # sentinel that matches every text. Put exactly that in place: a set that matches nothing.
    failed = re2.Set.SearchSet(re2.Options())
    failed.Add(r"\z\A.")
    failed.Compile()
    matcher._chunks[0].set = failed
    hits = matcher.match_message("xx alpha 42 beta")
    assert {h.signature.entry_id for h in hits} == {"a", "b"}
    assert matcher.fallbacks == 1


def test_ten_thousand_patterns_compile_and_match():
    records = [
        record(f"e{i}", rf"generated failure number {i} in (?P<where>\w+)") for i in range(10_000)
    ]
    matcher = SignatureMatcher(records)
    hits = matcher.match_message("generated failure number 9876 in forward")
    assert [h.signature.entry_id for h in hits] == ["e9876"]
    assert matcher.fallbacks == 0


def test_threshold_separates_known_from_weak():
    matcher = SignatureMatcher([record("weak", "a bit like an error here")])
    (match,) = match_paste(matcher, parse_traceback("some log line: a bit like an error here"))
    assert match.matched_in == "text" and match.confidence < KNOWN_MATCH_THRESHOLD
    assert known_matches([match]) == []


def test_repository_content_has_the_generic_signatures_guarded(content_matcher):
    # Entries whose pattern is short must name their exception type, or they would claim
    # unrelated errors in the text pass.
    short = [r for r in content_matcher.records if len(r.message) < 12 and r.exception is None]
    assert short == []
    assert Path(REPO_CONTENT).is_dir()
