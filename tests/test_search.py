"""Search: analysis of code and Chinese, ranking, facets, paging, suggestions, index upkeep."""

import os
from pathlib import Path

import pytest
from sqlmodel import Session

from app import storage
from app.ingest import ingest_content
from app.search import SearchService
from app.search.analysis import code_analyzer
from app.search.index import (
    CURRENT_FILE,
    current_generation,
    read_state,
    rebuild_index,
    update_index,
)
from tests.conftest import entry_text

pytestmark = pytest.mark.both_databases


def write(folder: Path, entry_id: str, **kwargs) -> Path:
    path = folder / f"{entry_id}.md"
    path.write_text(entry_text(entry_id, **kwargs), encoding="utf-8")
    return path


@pytest.fixture
def service(search_engine, engine, settings, content_dir):
    for number in range(25):
        write(
            content_dir,
            f"tensor-note-{number:02d}",
            kind="howto" if number % 5 else "error",
            signatures=None if number % 5 == 0 else "",
        )
    write(
        content_dir,
        "html-in-body",
        body="## What you see\n\nThe <script>alert(1)</script> tag appears near pitfall text.\n\n## Why it happens\n\nx\n\n## Fix\n\ny\n",
    )
    ingest_content(engine, content_dir)
    rebuild_index(engine, settings.index_dir)
    service = SearchService(settings.index_dir, engine, check_interval_ms=0)
    yield service
    service.close()


def test_tokenizer_keeps_identifiers_whole_and_split():
    tokens = [t.text for t in code_analyzer()("torch.cuda.FloatTensor bn1.num_batches_tracked")]
    assert tokens == [
        "torch.cuda.floattensor",
        "torch",
        "cuda",
        "floattensor",
        "float",
        "tensor",
        "bn1.num_batches_tracked",
        "bn1",
        "num_batches_tracked",
        "num",
        "batches",
        "tracked",
    ]
    query = [t.text for t in code_analyzer()("FloatTensor 显存不足", mode="query")]
    assert query == ["floattensor", "显存", "存不", "不足"]


def test_facets_paging_and_filters(service):
    result = service.search("sample pitfall", limit=10)
    assert result.total == 26 and result.pages == 3 and len(result.hits) == 10
    assert result.facets["kind"] == {"howto": 20, "error": 6}
    assert result.facets["tag"] == {"tensor": 26}
    last = service.search("sample pitfall", limit=10, page=3)
    assert len(last.hits) == 6
    seen = {
        h.id for p in (1, 2, 3) for h in service.search("sample pitfall", limit=10, page=p).hits
    }
    assert len(seen) == 26
    errors = service.search("sample pitfall", kind="error")
    assert errors.total == 6 and {h.kind for h in errors.hits} == {"error"}
    assert errors.facets["kind"] == {"error": 6}
    assert service.search("sample", tag="nosuchtag").total == 0


def test_empty_query_lists_everything(service):
    assert service.search("", limit=5).total == 26


def test_highlights_are_escaped_html_with_marks(service):
    (hit,) = service.search("script alert").hits
    assert hit.id == "html-in-body"
    assert "<script>" not in hit.highlights
    assert '&lt;<mark class="match term0">script</mark>&gt;' in hit.highlights


def test_relaxed_query_when_no_entry_has_every_word(service):
    result = service.search("alert zzzunknownword")
    assert result.relaxed and [h.id for h in result.hits] == ["html-in-body"]


def test_suggestion_for_a_typo(service):
    assert service.search("sentance", correct=False).suggestion == "sentence"
    corrected = service.search("sentance")  # nothing has "sentance": "sentence" is searched
    assert corrected.corrected_from == "sentance" and corrected.query == "sentence"
    assert corrected.total == service.search("sentence").total > 0
    assert service.search("sentence").suggestion is None
    assert service.search("pitfal").suggestion is None  # the stem of "pitfall": it finds entries


def test_searcher_is_reused_and_refreshed_after_ingest(service, engine, content_dir, settings):
    service.search("sample")
    (first,) = service._idle
    service.search("sample")
    assert service._idle == [first]  # reused while the index is unchanged
    write(content_dir, "brand-new", title="Quokka gradients vanish")
    ingest_content(engine, content_dir)
    # No explicit index update: the service notices the database moved and catches up.
    assert [h.id for h in service.search("quokka").hits] == ["brand-new"]
    assert read_state(settings.index_dir).seq == 27
    (content_dir / "brand-new.md").unlink()
    ingest_content(engine, content_dir)
    assert service.search("quokka").total == 0  # archived entries leave the index, at once


def test_incremental_update_equals_rebuild(search_engine, engine, settings, content_dir):
    write(content_dir, "alpha", title="Alpha pitfall")
    ingest_content(engine, content_dir)
    rebuild_index(engine, settings.index_dir)
    write(content_dir, "beta", title="Beta pitfall")
    write(content_dir, "alpha", title="Alpha renamed pitfall")
    ingest_content(engine, content_dir)
    state = update_index(engine, settings.index_dir)
    with Session(engine) as session:
        assert state.seq == storage.current_change_seq(session)
    service = SearchService(settings.index_dir)
    assert sorted(h.id for h in service.search("pitfall").hits) == ["alpha", "beta"]
    assert [h.id for h in service.search("renamed").hits] == ["alpha"]
    service.close()


def test_interrupted_rebuild_leaves_the_old_index_serving(
    search_engine, engine, settings, content_dir
):
    write(content_dir, "alpha", title="Alpha pitfall")
    ingest_content(engine, content_dir)
    rebuild_index(engine, settings.index_dir)
    serving = current_generation(settings.index_dir)
    service = SearchService(settings.index_dir)
    assert service.search("alpha").total == 1

    def documents_then_crash(_engine):
        def generate():
            yield {"id": "partial", "kind": "error", "title": "partial"}
            raise KeyboardInterrupt  # as if the operator pressed Ctrl-C mid-build

        return 99, generate()

    with pytest.raises(KeyboardInterrupt):
        rebuild_index(engine, settings.index_dir, documents=documents_then_crash)
    assert current_generation(settings.index_dir) == serving
    assert sorted(p.name for p in settings.index_dir.iterdir()) == sorted(
        [CURRENT_FILE, serving.name]
    )
    assert service.search("alpha").total == 1
    assert SearchService(settings.index_dir).search("alpha").total == 1

    # A build killed outright leaves a folder behind; the next rebuild clears it, but not a
    # newer build another process may still be writing.
    (settings.index_dir / "gen-1-1").mkdir()
    (settings.index_dir / f"gen-{10**20}-1").mkdir()
    rebuild_index(engine, settings.index_dir)
    assert sorted(p.name for p in settings.index_dir.glob("gen-*")) == sorted(
        [current_generation(settings.index_dir).name, f"gen-{10**20}-1"]
    )
    assert service.search("alpha").total == 1  # the long-lived service follows the swap
    service.close()


# ---- the repository's own entries ------------------------------------------------------------


@pytest.fixture(scope="module")
def real_service(module_search_engine, tmp_path_factory):
    from app.settings import load_settings
    from app.storage import create_db_engine, upgrade_schema
    from tests.conftest import REPO_CONTENT
    from tests.prepared import prepare_data_dir

    root = tmp_path_factory.mktemp("real")
    settings = load_settings(data_dir=root / "data", content_dir=REPO_CONTENT)
    prepare_data_dir(settings, tmp_path_factory)  # every entry ingested and indexed
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    service = SearchService(settings.index_dir, engine)
    yield service
    service.close()
    engine.dispose()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("num_batches_tracked", "state-dict-num-batches-tracked"),
        ("batches tracked", "state-dict-num-batches-tracked"),
        ("bn1.num_batches_tracked", "state-dict-num-batches-tracked"),
        ("FloatTensor", "tensor-cuda-not-inplace"),
        ("显存", "cuda-out-of-memory"),
        ("显存不足", "cuda-out-of-memory"),
        ("不连续", "view-non-contiguous"),
        ("contiguous", "view-non-contiguous"),
        ("view size is not compatible with input tensor's size and stride", "view-non-contiguous"),
    ],
)
def test_real_content_finds_the_right_entry_first(real_service, query: str, expected: str):
    result = real_service.search(query)
    assert result.hits, f"nothing found for {query!r}"
    assert result.hits[0].id == expected, [h.id for h in result.hits[:3]]


def test_real_content_finds_a_dotted_identifier_whole(real_service):
    top = {h.id for h in real_service.search("torch.cuda.FloatTensor").hits[:2]}
    assert top == {"tensor-cuda-not-inplace", "cuda-tensor-creation-slow"}


def test_real_content_highlights_quote_the_message_once(real_service):
    (hit,) = [
        h
        for h in real_service.search("killed by signal").hits
        if h.id == "dataloader-worker-killed"
    ]
    assert "RuntimeError: " in hit.highlights and "RuntimeError RuntimeError" not in hit.highlights


def test_real_content_suggests_contiguous_for_a_typo(real_service):
    assert real_service.search("contigous", correct=False).suggestion == "contiguous"


def test_another_engine_rebuilds_the_index_rather_than_reading_it(
    search_engine, engine, settings, content_dir
):
    write(content_dir, "alpha", title="Alpha pitfall")
    ingest_content(engine, content_dir)
    other = "tantivy" if search_engine == "whoosh" else "whoosh"
    rebuild_index(engine, settings.index_dir, search_engine=other)
    assert read_state(settings.index_dir).engine == other
    assert read_state(settings.index_dir, search_engine) is None  # never updated in place
    service = SearchService(settings.index_dir, engine, check_interval_ms=0)
    assert service.search_engine == search_engine == settings.search_engine
    assert [h.id for h in service.search("alpha").hits] == ["alpha"]
    assert read_state(settings.index_dir).engine == search_engine
    service.close()


def test_marks_are_found_by_pattern_escaped_and_cut_into_two_fragments():
    from app.search.highlight import mark_terms

    text = (
        "The <b> memory of num_batches_tracked grows; " + "x " * 200 + "memories and 显存不足 end"
    )
    marked = mark_terms(text, ("memori", "batch", "显存"))
    assert "&lt;b&gt;" in marked and "<b>" not in marked  # escaped, never raw
    assert '<mark class="match term0">memory</mark>' in marked  # a stem ending in i takes y
    assert "num_<mark" in marked  # a piece of an identifier
    assert marked.count(" … ") == 1  # two fragments: far apart
    assert mark_terms("nothing here", ("memori",)) == ""
    assert ">显存" not in mark_terms(text, ("memori",))  # in the text, but not a term: not marked
    assert '<mark class="match term2">显存</mark>' in marked


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_what_killed_reindexes_left_is_removed_at_the_next_start(engine, settings, content_dir):
    """A `reindex` killed part-way leaves a generation folder without state.json, one killed
    between its state and its swap a complete one newer than the served one; neither is ever
    served. Once their builder's process is gone they go; a build still under way stays."""
    import subprocess
    import time

    from app.bootstrap import prepare_data

    write(content_dir, "an-entry")
    prepare_data(settings, engine)
    index_dir = settings.index_dir
    dead = subprocess.Popen(["true"])
    dead.wait()  # a process id that no longer runs
    killed_part_way = index_dir / f"gen-{time.time_ns()}-{dead.pid}"
    killed_part_way.mkdir()
    (killed_part_way / "_1.seg").write_bytes(b"half a segment")
    killed_before_swap = index_dir / f"gen-{time.time_ns()}-{dead.pid}"
    killed_before_swap.mkdir()
    (killed_before_swap / "state.json").write_text("{}")
    under_way = index_dir / f"gen-{time.time_ns()}-{os.getpid()}"  # this process: alive
    under_way.mkdir()

    prepare_data(settings, engine)  # the next start

    left = sorted(p.name for p in index_dir.glob("gen-*"))
    assert left == sorted([current_generation(index_dir).name, under_way.name]), left
