"""The change feed as an outbox, on a real PostgreSQL server (and SQLite where it applies).

Sequence numbers are handed out at insert and become visible at commit. These tests make two
transactions commit in the reverse order of their numbers and check that no cache loses the late
one; that writers through `storage` are serialized; that a drift between the index and the feed
rebuilds the index; and that N processes preparing one empty database migrate and ingest once.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text
from sqlmodel import Session

from app import storage
from app.answers import MatcherCache
from app.bootstrap import prepare_data
from app.entries import parse_entry
from app.models import Change, Entry
from app.search import SearchService
from app.search.index import STATE_FILE, read_state, update_index
from app.settings import load_settings
from tests.conftest import entry_text

pytestmark = pytest.mark.both_databases


def _prepared(make_settings, content_dir, ids=("first-entry", "second-entry")):
    for entry_id in ids:
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    settings = make_settings(content_dir, index_check_interval_ms=0)
    engine = storage.create_db_engine(settings)
    prepare_data(settings, engine)
    return settings, engine


def _retitle_without_lock(session: Session, entry_id: str, title: str) -> None:
    """A write that takes its sequence number the way any INSERT does, without the feed lock:
    what a writer that bypassed `storage` (or a future bug) would do."""
    entry = session.get(Entry, entry_id)
    assert entry is not None
    entry.title = title
    session.add(entry)
    session.add(Change(entry_id=entry_id, action="update", revision=entry.revision, actor="t"))
    session.flush()


def _titles(search: SearchService, word: str) -> set[str]:
    search.expire()
    search.catch_up()
    return {hit.id for hit in search.search(word, highlights=False, facets=False).hits}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_change_committed_after_a_higher_number_is_still_applied(make_settings, content_dir):
    settings, engine = _prepared(make_settings, content_dir)
    search = SearchService(settings.index_dir, engine, check_interval_ms=0)
    matchers = MatcherCache(engine, check_interval_ms=0)
    matchers.current()
    with Session(engine) as early, Session(engine) as late:
        _retitle_without_lock(early, "first-entry", "zebrafish appears")  # number N
        _retitle_without_lock(late, "second-entry", "quokka appears")  # number N+1
        late.commit()  # N+1 is visible, N is not yet
        assert _titles(search, "quokka") == {"second-entry"}
        assert read_state(settings.index_dir).seq > 0
        early.commit()  # now N, below the index's highest applied number
    assert _titles(search, "zebrafish") == {"first-entry"}, "the late change was skipped"
    with Session(engine) as session:
        mark = storage.feed_mark(session)
    assert read_state(settings.index_dir).mark == mark
    matchers.expire()
    matchers.current()
    assert matchers._mark == mark  # the matcher saw the count move, not only the top number
    search.close()
    engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_writers_through_storage_commit_in_number_order(make_settings, content_dir):
    _, engine = _prepared(make_settings, content_dir)
    doc = parse_entry(entry_text("third-entry"), "third-entry.md")
    other = parse_entry(entry_text("fourth-entry"), "fourth-entry.md")
    first = Session(engine)
    storage.save_entry(first, doc=doc, author="t", source="api")
    first.flush()  # holds the feed lock until it commits
    done = threading.Event()

    def second_writer() -> None:
        with Session(engine) as second:
            storage.save_entry(second, doc=other, author="t", source="api")
            second.commit()
        done.set()

    thread = threading.Thread(target=second_writer)
    thread.start()
    assert not done.wait(0.5), "a second writer got a number while the first was open"
    first.commit()
    first.close()
    assert done.wait(10)
    thread.join()
    with Session(engine) as session:
        rows = storage.changes_since(session, seq=0)
    order = [c.entry_id for c in rows][-2:]
    assert order == ["third-entry", "fourth-entry"]
    engine.dispose()


def test_an_index_that_drifted_from_the_feed_is_rebuilt(make_settings, content_dir):
    settings, engine = _prepared(make_settings, content_dir)
    state = read_state(settings.index_dir)
    # An index that believes it applied one change fewer than the feed holds, with the same
    # top number: no change is newer, so only the count can tell.
    broken = state.to_json().replace(f'"count": {state.count}', f'"count": {state.count - 1}')
    (state.generation / STATE_FILE).write_text(broken, encoding="utf-8")
    rebuilt = update_index(engine, settings.index_dir)
    assert rebuilt.generation != state.generation
    assert rebuilt.mark == state.mark
    engine.dispose()


@pytest.mark.slow  # starts real processes
def test_processes_preparing_one_empty_database_together_ingest_once(
    make_settings, repo_content, tmp_path
):
    settings = make_settings(repo_content)
    reports = []

    def start(n: int):
        own = load_settings(
            data_dir=tmp_path / f"replica-{n}",
            content_dir=repo_content,
            database_url=settings.database_url,
        )
        engine = storage.create_db_engine(own)
        try:
            return prepare_data(own, engine, ingest="if-empty")
        finally:
            engine.dispose()

    if settings.is_sqlite:  # one data dir, as processes on one machine share it
        reports = [r for r in ThreadPoolExecutor(3).map(lambda _: _shared(settings), range(3))]
    else:
        reports = list(ThreadPoolExecutor(3).map(start, range(3)))
    ingested = [r.ingest.changed for r in reports if r.ingest is not None]
    assert sorted(ingested, reverse=True)[0] == len(list(repo_content.glob("*.md")))
    assert sum(ingested) == ingested[0], f"more than one process ingested: {ingested}"
    engine = storage.create_db_engine(settings)
    with Session(engine) as session:
        assert storage.count_entries(session) == len(list(repo_content.glob("*.md")))
    engine.dispose()


def _shared(settings):
    engine = storage.create_db_engine(settings)
    try:
        return prepare_data(settings, engine, ingest="if-empty")
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_process_waits_for_the_setup_lock_at_most_the_timeout(make_settings, content_dir):
    settings = make_settings(content_dir, setup_lock_timeout_s=0.5)
    engine = storage.create_db_engine(settings)
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": storage.SETUP_LOCK_KEY})
        holder.commit()
        started = time.monotonic()
        with pytest.raises(storage.SetupLockTimeout, match=r"over 0\.5 s"):
            prepare_data(settings, engine)
        assert time.monotonic() - started < 5
        holder.invalidate()  # the holder's session ends, and its lock with it
    prepare_data(settings, engine)  # free again
    engine.dispose()
