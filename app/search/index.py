"""The search index: derived from the database, rebuilt atomically, caught up incrementally.

Layout of the index folder:

    CURRENT            name of the generation that serves (replaced atomically)
    gen-<stamp>/       a complete index of one engine plus state.json {"seq": ..., "engine": ...}

The engine (Whoosh, or tantivy when PITFALLS_SEARCH_ENGINE says so) only writes and reads the
files of a generation; everything here (generations, the feed's mark, catch-up) is shared.
A generation written by another engine or schema version is rebuilt, never updated.

A rebuild writes a new generation beside the serving one and only then replaces CURRENT, so an
interrupted rebuild leaves the old index serving. Incremental updates follow the change feed:
every change after the generation's `seq` is applied, then `seq` moves.

Sequence numbers are handed out at insert, not at commit. Writers serialize on PostgreSQL (see
`storage.feed._record_change`), and catch-up does not rely on it: it re-reads the last FEED_WINDOW
numbers too and applies any change in them it has not applied (state.json lists those it has),
and it counts. When the changes applied do not add up to the feed's count (a change older than
the window, a restored database), the index is rebuilt.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from app.feed_mark import FeedMark
from app.files import write_atomically

if TYPE_CHECKING:  # the database's libraries are imported by the functions that read it
    from sqlalchemy import Engine
    from sqlmodel import Session

    from app.models import Entry, Signature
    from app.search.engine import SearchEngine

logger = logging.getLogger(__name__)

CURRENT_FILE = "CURRENT"
STATE_FILE = "state.json"
FEED_WINDOW = 1000  # sequence numbers below the newest that catch-up reads again
# Moves whenever the schema or a document's fields change: an index of another version is
# rebuilt rather than updated.
SCHEMA_VERSION = 3

ENGINES = ("whoosh", "tantivy")
ENGINE_VARIABLE = "PITFALLS_SEARCH_ENGINE"


def engine_name(name: str | None = None) -> str:
    """The search engine to use: `name`, else the PITFALLS_SEARCH_ENGINE setting, else Whoosh."""
    name = (name or os.environ.get(ENGINE_VARIABLE) or "whoosh").strip().lower()
    if name not in ENGINES:
        raise ValueError(f"unknown search engine {name!r}: use one of {', '.join(ENGINES)}")
    return name


def load_engine(name: str | None = None) -> SearchEngine:
    """The module that writes and reads generations for the engine `name` (imported lazily:
    tantivy is an optional extra)."""
    if engine_name(name) == "tantivy":
        from app.search import tantivy_engine

        return tantivy_engine
    from app.search import whoosh_engine

    return whoosh_engine


@dataclass(frozen=True)
class IndexState:
    generation: Path
    seq: int  # the highest change applied
    built_at: str
    updated_at: str
    count: int = -1  # how many changes are applied (-1: an index written before counting)
    recent: tuple[int, ...] = ()  # the applied numbers within FEED_WINDOW of `seq`
    engine: str = "whoosh"  # the search engine that wrote the generation

    @property
    def mark(self) -> FeedMark:
        return FeedMark(self.count, self.seq)

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": SCHEMA_VERSION,
                "engine": self.engine,
                "seq": self.seq,
                "count": self.count,
                "recent": list(self.recent),
                "built_at": self.built_at,
                "updated_at": self.updated_at,
            }
        )


def document_for(entry: Entry, signatures: Iterable[Signature]) -> dict:
    """The index document of one entry; the only place that decides what is searchable."""
    from app.rendering import extract_text
    from app.search.glossary import expansions

    text = extract_text(entry.body_markdown)
    # The example already starts with its exception type; the name is added only when it does not.
    signature_text = "\n".join(
        s.example if not s.exception or s.exception in s.example else f"{s.exception} {s.example}"
        for s in signatures
    )
    aliases = " ; ".join(entry.aliases)
    questions = "\n".join(entry.questions)
    searched = "\n".join(
        (entry.title, entry.summary, aliases, questions, signature_text, text.prose)
    )
    return {
        "id": entry.id,
        "kind": entry.kind,
        "tags": ",".join(entry.tags),
        "id_text": entry.id,
        "title": entry.title,
        "aliases": aliases,
        "questions": questions,
        "glossary": expansions(searched),
        "signatures": signature_text,
        "summary": entry.summary,
        "body": text.prose,
        "code": text.code,
        "spell": " ".join(
            (entry.title, entry.summary, aliases, *entry.questions, signature_text, text.prose)
        ),
        "updated": entry.updated_at.isoformat() if entry.updated_at else "",
    }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_atomic(path: Path, text: str) -> None:
    write_atomically(path, text.encode("utf-8"))


def current_generation(index_dir: Path) -> Path | None:
    try:
        name = (index_dir / CURRENT_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    generation = index_dir / name
    return generation if name and generation.is_dir() else None


def read_state(index_dir: Path, engine: str | None = None) -> IndexState | None:
    """The serving generation's state; None when there is none, or when it was written by
    another schema version or (when `engine` is given) by another engine."""
    generation = current_generation(index_dir)
    if generation is None:
        return None
    try:
        data = json.loads((generation / STATE_FILE).read_text(encoding="utf-8"))
        if data.get("schema", 1) != SCHEMA_VERSION:
            return None  # built by another version: rebuilt, never updated in place
        written_by = data.get("engine", "whoosh")
        if engine is not None and written_by != engine:
            return None
        return IndexState(
            generation,
            int(data["seq"]),
            data["built_at"],
            data["updated_at"],
            int(data.get("count", -1)),
            tuple(int(n) for n in data.get("recent", ())),
            written_by,
        )
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class FeedPosition:
    """Where in the change feed a set of documents stands."""

    count: int
    seq: int
    recent: tuple[int, ...]


def _feed_position(session: Session) -> FeedPosition:
    from app import storage

    # Documents are read after this: a change committing meanwhile may be in them without being
    # counted here, and is then applied once more by the next catch-up (harmless).
    count, recent = storage.newest_change_numbers(session, window=FEED_WINDOW)
    return FeedPosition(count, max(recent, default=0), tuple(recent))


def _entry_documents(engine: Engine) -> tuple[FeedPosition, list[dict]]:
    from sqlmodel import Session

    from app import storage

    with Session(engine) as session:
        position = _feed_position(session)
        signatures: dict[str, list[Signature]] = {}
        for sig in storage.active_signatures(session):
            signatures.setdefault(sig.entry_id, []).append(sig)
        docs = [document_for(e, signatures.get(e.id, [])) for e in storage.list_entries(session)]
    return position, docs


def rebuild_index(
    engine: Engine,
    index_dir: Path,
    *,
    cjk: str = "bigram",
    documents: Callable[[Engine], tuple[FeedPosition, list[dict]]] = _entry_documents,
    search_engine: str | None = None,
) -> IndexState:
    """Build a complete new generation beside the serving one, then swap CURRENT to it."""
    name = engine_name(search_engine)
    writer = load_engine(name)
    index_dir.mkdir(parents=True, exist_ok=True)
    generation = index_dir / f"gen-{time.time_ns()}-{os.getpid()}"
    generation.mkdir()
    try:
        position, docs = documents(engine)
        writer.write_generation(generation, docs, cjk=cjk)
        stamp = _now()
        state = IndexState(
            generation, position.seq, stamp, stamp, position.count, position.recent, name
        )
        _write_atomic(generation / STATE_FILE, state.to_json())
    except BaseException:
        shutil.rmtree(generation, ignore_errors=True)
        raise
    serving = current_generation(index_dir)
    if serving is not None and _generation_stamp(serving.name) > _generation_stamp(generation.name):
        # Another process started a build after this one and swapped it in first: its copy
        # read the database later, so it stays; this one is dropped.
        shutil.rmtree(generation, ignore_errors=True)
        return read_state(index_dir) or state
    _write_atomic(index_dir / CURRENT_FILE, generation.name + "\n")
    _remove_stale_generations(index_dir, keep=generation.name)
    return state


def _generation_stamp(name: str) -> int:
    try:
        return int(name.split("-")[1])
    except (IndexError, ValueError):
        return 0


ABANDONED_BUILD_S = 600  # a generation without state.json this old is a build that died


def _builder_alive(name: str) -> bool:
    """Whether the process that built generation `name` (`gen-<ns>-<pid>`) still runs here."""
    try:
        pid = int(name.rsplit("-", 1)[1])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # it exists, as another user's process
    return pid != 0


def _remove_stale_generations(index_dir: Path, keep: str) -> None:
    """Remove complete generations older than `keep`, and builds whose builder died: killed
    part-way (no state.json) or before its swap (newer than `keep`, never served), once their
    process is gone or they are old. A build still under way may be another process's, and
    is left alone.

    Open readers of an old generation keep working on POSIX: their files stay until closed.
    """
    newest = _generation_stamp(keep)
    for child in index_dir.glob("gen-*"):
        if child.name == keep:
            continue
        complete = (child / STATE_FILE).exists()
        age_s = (time.time_ns() - _generation_stamp(child.name)) / 1e9
        served_before = _generation_stamp(child.name) < newest and complete
        if served_before or not _builder_alive(child.name) or age_s > ABANDONED_BUILD_S:
            shutil.rmtree(child, ignore_errors=True)


def remove_dead_builds(index_dir: Path) -> None:
    """At start-up: what killed builds left behind (see `_remove_stale_generations`)."""
    serving = current_generation(index_dir)
    if serving is not None:
        _remove_stale_generations(index_dir, keep=serving.name)


def update_index(
    engine: Engine,
    index_dir: Path,
    search_engine: str | None = None,
    *,
    on_rebuild: Callable[[str], None] | None = None,
) -> IndexState:
    """Apply every change the index has not applied; rebuild when there is no usable index, or
    when the changes applied do not add up to the feed (see the module's docstring).
    `on_rebuild` hears why, just before a rebuild starts."""
    from sqlmodel import Session

    from app import storage

    name = engine_name(search_engine)
    state = read_state(index_dir, name)
    if state is None or state.count < 0:
        if on_rebuild:
            on_rebuild("none yet" if current_generation(index_dir) is None else "another version")
        return rebuild_index(engine, index_dir, search_engine=name)
    with Session(engine) as session:
        mark = storage.feed_mark(session)
        if mark == state.mark:
            return state
        applied = set(state.recent)
        window, total = storage.changes_and_count(session, seq=max(0, state.seq - FEED_WINDOW))
        numbered = [(c.seq, c.entry_id) for c in window if c.seq is not None]  # all: stored rows
        changes = [(seq, entry) for seq, entry in numbered if seq > state.seq or seq not in applied]
        if state.count + len(changes) != total:
            logger.warning(
                "search index: %d changes applied of %d in the feed; rebuilding",
                state.count + len(changes),
                total,
            )
            if on_rebuild:
                on_rebuild("behind the change feed")
            return rebuild_index(engine, index_dir, search_engine=name)
        entry_ids = list(dict.fromkeys(entry_id for _seq, entry_id in changes))
        entries = storage.get_entries(session, entry_ids=entry_ids)
        documents = {
            entry_id: document_for(entry, storage.entry_signatures(session, entry_id=entry_id))
            for entry_id, entry in entries.items()
            if not entry.archived
        }
    if not load_engine(name).apply_changes(state.generation, entry_ids, documents):
        return state  # another process is applying the same changes right now
    new_seq = max(state.seq, *(seq for seq, _entry_id in changes))
    seen = applied | {seq for seq, _entry_id in changes}
    recent = sorted(n for n in seen if n > new_seq - FEED_WINDOW)
    new_state = IndexState(
        state.generation,
        new_seq,
        state.built_at,
        _now(),
        state.count + len(changes),
        tuple(recent),
        name,
    )
    _write_atomic(state.generation / STATE_FILE, new_state.to_json())
    return new_state
