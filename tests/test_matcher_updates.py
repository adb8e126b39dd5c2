"""A matcher brought up to date from the changed entries alone answers as one built afresh.

`PasteMatcher.updated` (what a process runs when the change feed moves) touches only the entries a
change names: their signatures are compiled into a small set, their texts re-read into the likely
tier's postings. After a sequence of creates, edits and deletes over the shipped entries, every
paste here gets the very answer a matcher built from all entries gets: the same matches with the
same positions and confidences, the same related entries, the same candidates with the same
scores and features.
"""

import dataclasses
import random

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlmodel import Session

from app import storage
from app.checker import (
    collect_entry_files,
    entry_texts,
    load_entry_files,
    reached_examples,
    signature_records,
)
from app.matching import signature_tier
from app.matching.calibration import load_model
from app.matching.evaluation import load_corpus
from app.matching.likely import EntryText
from app.matching.paste_matcher import PasteMatcher
from app.matching.signature_tier import MAX_TAILS, SignatureMatcher, SignatureRecord
from app.models import Entry, Signature
from app.signatures import split_exception_line
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT, entry_text
from tests.test_caching import Site, site  # noqa: F401  # the fixture
from tests.test_real_pastes import CORPUS

CHUNK = 40  # small sets, so that updates share, kill and recompile several of them


@pytest.fixture(scope="module")
def shipped() -> tuple[list[SignatureRecord], list[EntryText]]:
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    records = sorted(signature_records(docs), key=lambda r: (r.entry_id, r.position))
    return records, sorted(entry_texts(docs), key=lambda t: t.entry_id)


def _fresh(records, texts, model) -> PasteMatcher:
    ordered = sorted(records, key=lambda r: (r.entry_id, r.position))
    matcher = PasteMatcher(
        SignatureMatcher(ordered, chunk_size=CHUNK, reuse=False),
        sorted(texts, key=lambda t: t.entry_id),
        model,
    )
    return matcher


def _answer(matcher: PasteMatcher, paste: str):
    result = matcher.match(parse_traceback(paste))
    return (
        result.matches,
        [(c.entry_id, c.score, c.confidence, c.features) for c in result.related],
        [(c.entry_id, c.score, c.confidence, c.features, c.words) for c in result.candidates],
    )


def _steps(records: list[SignatureRecord], texts: list[EntryText]):
    """Changes as the feed would name them: {entry id: (its records, its text) or None}."""
    rng = random.Random(30)
    by_entry: dict[str, list[SignatureRecord]] = {}
    for r in records:
        by_entry.setdefault(r.entry_id, []).append(r)
    text_of = {t.entry_id: t for t in texts}
    ids = sorted(text_of)
    donor = ids[len(ids) // 2]

    def edited(entry_id: str, word: str):
        sigs = [
            dataclasses.replace(s, message=s.message + f" {word}", example=s.example + f" {word}")
            if s.position == 0
            else s
            for s in by_entry.get(entry_id, [])
        ]
        text = dataclasses.replace(text_of[entry_id], title=text_of[entry_id].title + f" {word}")
        return sigs, dataclasses.replace(text, examples=tuple(s.example for s in sigs))

    def copied(new_id: str, source: str):
        # the same signatures and text under another id: ties everywhere with its source
        sigs = [dataclasses.replace(s, entry_id=new_id) for s in by_entry.get(source, [])]
        return sigs, dataclasses.replace(text_of[source], entry_id=new_id)

    yield {ids[3]: edited(ids[3], "reworded")}
    yield {ids[7]: None, "aaa-first-new": copied("aaa-first-new", donor)}
    yield {"zzz-last-new": copied("zzz-last-new", ids[0]), ids[3]: edited(ids[3], "again")}
    yield {f"{donor}-twin": copied(f"{donor}-twin", donor)}
    # a whole run of neighbours gone at once: their shared sets are mostly dead then
    yield dict.fromkeys(ids[20:50])
    yield {"aaa-first-new": None, ids[60]: edited(ids[60], "third")}
    for n in range(12):  # many small saves: the small sets join up
        entry_id = rng.choice(ids[60:])
        yield {entry_id: edited(entry_id, f"round{n}")}
    yield {ids[20]: (by_entry.get(ids[20], []), text_of[ids[20]])}  # one comes back unchanged


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_after_creates_edits_and_deletes_the_updated_matcher_answers_as_a_fresh_one(shipped):
    records, texts = shipped
    model = load_model()
    current = _fresh(records, texts, model)
    state_records = {r.entry_id: [] for r in records}
    for r in records:
        state_records[r.entry_id].append(r)
    state_texts = {t.entry_id: t for t in texts}
    cases = load_corpus(CORPUS)
    pastes = [c.text for c in random.Random(7).sample(cases, 120)]
    for step in _steps(records, texts):
        new_records, new_texts = [], []
        for entry_id, now in step.items():
            if now is None:
                state_records.pop(entry_id, None)
                state_texts.pop(entry_id, None)
                continue
            sigs, text = now
            state_records[entry_id], state_texts[entry_id] = sigs, text
            new_records.extend(sigs)
            new_texts.append(text)
        current = current.updated(step, new_records, new_texts)
        every = [r for sigs in state_records.values() for r in sigs]
        fresh = _fresh(every, state_texts.values(), model)
        assert current.signatures.records == fresh.signatures.records
        assert len(current.likely) == len(fresh.likely)
        # sets at least half full, and a few small ones, however many saves there were
        assert len(current.signatures._chunks) <= 2 * len(fresh.signatures._chunks) + MAX_TAILS
        changed_examples = [r.example for r in new_records]
        for paste in [*changed_examples, *(r.example for r in every[::9]), *pastes]:
            assert _answer(current, paste) == _answer(fresh, paste), paste


def test_an_update_reads_and_compiles_only_what_changed(shipped):
    records, texts = shipped
    base = _fresh(records, texts, load_model())
    entry_id = texts[5].entry_id
    sigs = [
        dataclasses.replace(r, message=r.message + " x") for r in records if r.entry_id == entry_id
    ]
    text = dataclasses.replace(texts[5], summary=texts[5].summary + " more")
    updated = base.updated([entry_id], sigs, [text])
    assert updated.likely.read_afresh == 1
    shared = {id(c.set) for c in base.signatures._chunks}
    new_sets = [c for c in updated.signatures._chunks if id(c.set) not in shared]
    assert sum(len(c.records) for c in new_sets) == len(sigs)
    # the one it replaced is untouched (a request may still be answering with it)
    assert base.signatures.records == records and len(base.likely) == len(texts)


def test_the_process_matcher_follows_saves_from_the_feed_without_reading_every_entry(site: Site):  # noqa: F811
    client = site.anonymous()
    matchers = site.app.state.runtime.matchers
    matchers.current()
    full_builds, read = matchers.full_builds, matchers.entries_read
    twin = client.get("/api/v1/entries/first-entry")
    edited = (
        twin.json()["markdown"]
        .replace("number (?P<n>", "count (?P<n>")
        .replace("number 42", "count 42")
    )
    saved = client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": edited, "message": "count"},
        headers={**site.writer, "If-Match": twin.headers["etag"]},
    )
    assert saved.status_code == 200, saved.text
    after = matchers.current()
    assert matchers.full_builds == full_builds
    assert matchers.entries_read - read == 1
    with Session(site.app.state.runtime.engine) as session:
        full = PasteMatcher(
            SignatureMatcher(storage.active_signature_records(session), reuse=False),
            storage.active_entry_texts(session),
        )
        mark = storage.feed_mark(session)
    assert after.signatures.records == full.signatures.records
    assert after.mark == mark
    answer = client.post(
        "/api/v1/match", json={"text": "RuntimeError: failure in first-entry count 7"}
    ).json()
    assert answer["matches"][0]["id"] == "first-entry"
    assert answer["change"] == mark.seq


# ---- a save costs what it changes -------------------------------------------------------------


def _generated(n: int) -> str:
    return entry_text(
        f"generated-{n:04d}",
        title=f"Generated pitfall number {n}",
        signatures=(
            "signatures:\n"
            "  - exception: RuntimeError\n"
            f"    message: 'generated failure {n:04d} in (?P<what>\\w+)'\n"
            f"    example: 'RuntimeError: generated failure {n:04d} in forward'\n"
        ),
    )


def _save_work(make_settings, content_dir, size: int) -> dict[str, int]:
    """What one edit through the API costs, the process's matcher following it included:
    entries and signatures loaded through the ORM, patterns and sets compiled."""
    for n in range(size):
        (content_dir / f"generated-{n:04d}.md").write_text(_generated(n), encoding="utf-8")
    from app.web import create_app

    work = dict.fromkeys(("entries loaded", "signatures loaded", "patterns", "sets"), 0)

    def count(name):
        def counted(*args, **kwargs):
            work[name] += 1

        return counted

    settings = make_settings(content_dir, data_dir=content_dir.parent / f"data-{size}")
    with TestClient(create_app(settings)) as client:
        site = Site(client)
        matchers = client.app.state.runtime.matchers
        matchers.current()
        twin = client.get("/api/v1/entries/generated-0003")
        edited = twin.json()["markdown"].replace("Generated pitfall", "A generated pitfall")
        listeners = [
            (Entry, "load", count("entries loaded")),
            (Signature, "load", count("signatures loaded")),
        ]
        for target, name, listener in listeners:
            event.listen(target, name, listener)
        compile_pattern, chunk = signature_tier.compile_pattern, signature_tier._Chunk.__init__

        def compiling(*args, **kwargs):
            work["patterns"] += 1
            return compile_pattern(*args, **kwargs)

        def new_set(self, *args, **kwargs):
            work["sets"] += 1
            chunk(self, *args, **kwargs)

        signature_tier.compile_pattern = compiling
        signature_tier._Chunk.__init__ = new_set  # type: ignore[method-assign]
        try:
            saved = client.put(
                "/api/v1/entries/generated-0003",
                json={"markdown": edited, "message": "a title"},
                headers={**site.writer, "If-Match": twin.headers["etag"]},
            )
            assert saved.status_code == 200, saved.text
            matcher = matchers.current()
        finally:
            signature_tier.compile_pattern, signature_tier._Chunk.__init__ = compile_pattern, chunk
            for target, name, listener in listeners:
                event.remove(target, name, listener)
        assert len(matcher.likely) == size
        answer = client.post(
            "/api/v1/match", json={"text": "RuntimeError: generated failure 0003 in forward"}
        ).json()
        assert answer["matches"][0]["id"] == "generated-0003"
    return work


def test_one_save_does_the_same_work_at_n_and_at_4n_entries(make_settings, tmp_path):
    small, large = tmp_path / "small" / "content", tmp_path / "large" / "content"
    small.mkdir(parents=True), large.mkdir(parents=True)
    at_n = _save_work(make_settings, small, 30)
    at_4n = _save_work(make_settings, large, 120)
    # The entry saved, read by the check, the save, the matcher's update and the search index's
    # catch-up (in the request or in the feed follower, whichever comes first: hence at most);
    # one set for the draft's own signatures, one for the matcher's update.
    for work in (at_n, at_4n):
        assert work["entries loaded"] <= 4 and work["signatures loaded"] <= 4, (at_n, at_4n)
        assert work["patterns"] <= 1 and work["sets"] <= 2, (at_n, at_4n)


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_the_examples_a_drafts_patterns_reach_are_those_a_set_pass_per_example_finds(shipped):
    """The save's one search per pattern over all messages joined finds exactly the examples
    that matching each example against the draft's signatures finds (then judged the same)."""
    records, _ = shipped
    messages = [split_exception_line(r.example).message for r in records]
    tricky = [
        SignatureRecord("anchored", 0, r"^CUDA error", "RuntimeError: CUDA error: x"),
        SignatureRecord("spanning", 0, r"(?s)out of.*memory", "RuntimeError: out of memory"),
        SignatureRecord("empty", 0, r"(?:)", "RuntimeError: anything"),
    ]
    by_entry: dict[str, list[SignatureRecord]] = {}
    for r in records:
        by_entry.setdefault(r.entry_id, []).append(r)
    for own in [*by_entry.values(), *([t] for t in tricky)]:
        entry_id = own[0].entry_id
        others = [r for r in records if r.entry_id != entry_id]
        kept = [m for r, m in zip(records, messages, strict=True) if r.entry_id != entry_id]
        single = SignatureMatcher(own)
        expected = [r for r in others if single.match_exception_line(r.example)]
        assert reached_examples(own, others, kept) == expected, entry_id
        assert reached_examples(own, others) == expected, entry_id
