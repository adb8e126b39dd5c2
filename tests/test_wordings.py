"""Every wording an entry lists, as some release of PyTorch or a wrapper prints it, is answered
with that entry first, by the paste matcher built as /api/v1/match builds it.

A wording is a fact quoted from a release's source (`wordings:` in the front-matter); a signature
that stops matching an older or newer wording fails here, not silently on a user's paste.
"""

from pathlib import Path

import pytest

from app.checker import (
    check_paths,
    collect_entry_files,
    entry_texts,
    load_entry_files,
    signature_records,
)
from app.matching.paste_matcher import PasteMatcher
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT, entry_text

# Entries that carry wordings today: a floor, so that none is dropped unnoticed.
MIN_ENTRIES_WITH_WORDINGS = 145

DOCS = load_entry_files(collect_entry_files([REPO_CONTENT]))
WORDINGS = [
    pytest.param(doc.front.id, w.text, id=f"{doc.front.id}[{i}]")
    for doc in DOCS
    if doc.front is not None
    for i, w in enumerate(doc.front.wordings)
]


@pytest.fixture(scope="module")
def matcher() -> PasteMatcher:
    # As `answers.MatcherCache` builds it: every signature, every entry's text, the shipped model.
    return PasteMatcher.build(signature_records(DOCS), entry_texts(DOCS))


@pytest.mark.parametrize(("entry_id", "text"), WORDINGS)
def test_each_wording_is_matched_to_its_entry_first(matcher, entry_id, text):
    matches = matcher.match(parse_traceback(text)).matches
    assert matches, f"nothing matches {text!r}"
    first = matches[0]
    assert (first.entry_id, first.tier) == (entry_id, "signature"), [
        (m.entry_id, m.tier, m.confidence) for m in matches[:3]
    ]


def test_enough_entries_carry_wordings():
    carrying = [d for d in DOCS if d.front is not None and d.front.wordings]
    assert len(carrying) >= MIN_ENTRIES_WITH_WORDINGS


def test_every_wording_names_its_source():
    for doc in DOCS:
        for wording in doc.front.wordings if doc.front is not None else ():
            owner_repo, release, path = wording.source.split(" ")
            assert owner_repo.count("/") == 1 and release and path, wording.source


WORDING_ENTRY = "wordings:\n  - text: {text}\n    source: {source}\n"
SOURCE = "pytorch/pytorch v2.4.0 aten/src/ATen/native/Sample.cpp"


def _write(folder: Path, entry_id: str, wordings: str) -> Path:
    path = folder / f"{entry_id}.md"
    path.write_text(entry_text(entry_id, extra_front=wordings), encoding="utf-8")
    return path


def test_a_wording_of_the_entry_passes_the_check(content_dir: Path):
    text = "'RuntimeError: failure in good number 7 happened'"
    _write(content_dir, "good", WORDING_ENTRY.format(text=text, source=f"'{SOURCE}'"))
    assert check_paths([content_dir]).problems == []


def test_a_wording_no_signature_matches_is_reported_at_its_line(content_dir: Path):
    text = "'RuntimeError: an unrelated failure'"
    _write(content_dir, "lost", WORDING_ENTRY.format(text=text, source=f"'{SOURCE}'"))
    messages = [str(p) for p in check_paths([content_dir]).errors]
    assert messages == [
        f"{content_dir}/lost.md:8: wordings[0] is matched by no signature of this entry: "
        "widen a signature or add one for this wording"
    ]


def test_a_wording_another_entry_wins_is_reported(content_dir: Path):
    rival = (
        "signatures:\n  - exception: RuntimeError\n"
        "    message: 'failure in taken number (?P<n>\\d+) happened'\n"
        "    example: 'RuntimeError: failure in taken number 1 happened'\n"
    )
    (content_dir / "rival.md").write_text(entry_text("rival", signatures=rival), encoding="utf-8")
    text = "'RuntimeError: failure in taken number 7 happened'"
    _write(content_dir, "taken", WORDING_ENTRY.format(text=text, source=f"'{SOURCE}'"))
    messages = [str(p) for p in check_paths([content_dir]).errors if "wordings[" in p.message]
    assert messages == [
        f"{content_dir}/taken.md:8: wordings[0] is matched as well or better by entry "
        "'rival': make one pattern more specific"
    ]


@pytest.mark.parametrize(
    ("wordings", "expected"),
    [
        (
            WORDING_ENTRY.format(
                text="'RuntimeError: failure in bad number 1 happened'", source="'v2.4.0'"
            ),
            "bad.md:9: wordings[0].source 'v2.4.0' must read 'owner/repo <tag or release line> "
            "<path in that repo>', such as 'pytorch/pytorch v1.13.0 "
            "aten/src/ATen/native/TensorShape.cpp'",
        ),
        (
            WORDING_ENTRY.format(text="''", source=f"'{SOURCE}'"),
            "bad.md:8: wordings[0].text is empty",
        ),
        (
            "wordings:\n  - text: 'RuntimeError: failure in bad number 1 happened'\n"
            f"    source: '{SOURCE}'\n    note: why\n",
            "bad.md:10: unknown field 'note' (allowed: text, source)",
        ),
        (
            "wordings:\n  - text: 'RuntimeError: failure in bad number 1 happened'\n",
            "bad.md:8: required field 'wordings.0.source' is missing",
        ),
    ],
)
def test_a_malformed_wording_is_reported_at_its_line(content_dir: Path, wordings, expected):
    _write(content_dir, "bad", wordings)
    messages = [str(p) for p in check_paths([content_dir]).errors]
    assert messages == [f"{content_dir}/{expected}"]
