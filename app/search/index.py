"""The Whoosh index: derived from the database, rebuilt atomically, caught up incrementally.

Layout of the index folder:

    CURRENT            name of the generation that serves (replaced atomically)
    gen-<stamp>/       a complete Whoosh index plus state.json {"seq": ..., "built_at": ...}

A rebuild writes a new generation beside the serving one and only then replaces CURRENT, so an
interrupted rebuild leaves the old index serving. Incremental updates follow the change feed:
every change after the generation's `seq` is applied, then `seq` moves.

Sequence numbers are handed out at insert, not at commit. Writers serialize on PostgreSQL (see
`storage._record_change`), and catch-up does not rely on it: it re-reads the last FEED_WINDOW
numbers too and applies any change in them it has not applied (state.json lists those it has),
and it counts. When the changes applied do not add up to the feed's count (a change older than
the window, a restored database), the index is rebuilt.
"""

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine
from sqlmodel import Session
from whoosh.fields import ID, KEYWORD, STORED, TEXT, Schema
from whoosh.filedb.filestore import FileStorage
from whoosh.index import LockError

from app import storage
from app.files import write_atomically
from app.models import Entry, Signature
from app.rendering import extract_text
from app.search.analysis import code_analyzer, prose_analyzer, spelling_analyzer
from app.search.glossary import expansions

logger = logging.getLogger(__name__)

CURRENT_FILE = "CURRENT"
STATE_FILE = "state.json"
FEED_WINDOW = 1000  # sequence numbers below the newest that catch-up reads again
# Moves whenever the schema or a document's fields change: an index of another version is
# rebuilt rather than updated.
SCHEMA_VERSION = 3

# Field boosts: id and title > aliases > signatures and questions > summary, glossary > body
# (aliases and glossary chosen on half A of the real question titles, bench/questions.py).
FIELD_BOOSTS = {
    "id_text": 6.0,
    "title": 5.0,
    "aliases": 6.0,
    "questions": 3.0,
    "glossary": 2.0,
    "signatures": 3.0,
    "summary": 2.0,
    "body": 1.0,
    "code": 1.0,
}
SEARCH_FIELDS = tuple(FIELD_BOOSTS)


def build_schema(cjk: str = "bigram") -> Schema:
    prose = prose_analyzer(cjk)
    code = code_analyzer(cjk)
    return Schema(
        id=ID(stored=True, unique=True),
        kind=ID(stored=True),
        tags=KEYWORD(stored=True, commas=True, lowercase=True, scorable=False),
        id_text=TEXT(analyzer=code),
        title=TEXT(analyzer=prose, stored=True),
        aliases=TEXT(analyzer=code, stored=True),
        questions=TEXT(analyzer=prose, stored=True),
        glossary=TEXT(analyzer=prose),  # app.search.glossary's expansions
        signatures=TEXT(analyzer=code, stored=True),
        summary=TEXT(analyzer=prose, stored=True),
        body=TEXT(analyzer=prose, stored=True),
        code=TEXT(analyzer=code),
        spell=TEXT(analyzer=spelling_analyzer(), phrase=False),  # for "did you mean"
        updated=STORED(),
    )


@dataclass(frozen=True)
class IndexState:
    generation: Path
    seq: int  # the highest change applied
    built_at: str
    updated_at: str
    count: int = -1  # how many changes are applied (-1: an index written before counting)
    recent: tuple[int, ...] = ()  # the applied numbers within FEED_WINDOW of `seq`

    @property
    def mark(self) -> storage.FeedMark:
        return storage.FeedMark(self.count, self.seq)

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": SCHEMA_VERSION,
                "seq": self.seq,
                "count": self.count,
                "recent": list(self.recent),
                "built_at": self.built_at,
                "updated_at": self.updated_at,
            }
        )


def document_for(entry: Entry, signatures: Iterable[Signature]) -> dict:
    """The index document of one entry; the only place that decides what is searchable."""
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


def _storage(generation: Path) -> FileStorage:
    # Plain reads, never mmap: a segment truncated under a process must be an error it can
    # handle (a rebuild), not a SIGBUS that kills it.
    return FileStorage(str(generation), supports_mmap=False)


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


def read_state(index_dir: Path) -> IndexState | None:
    generation = current_generation(index_dir)
    if generation is None:
        return None
    try:
        data = json.loads((generation / STATE_FILE).read_text(encoding="utf-8"))
        if data.get("schema", 1) != SCHEMA_VERSION:
            return None  # built by another version: rebuilt, never updated in place
        return IndexState(
            generation,
            int(data["seq"]),
            data["built_at"],
            data["updated_at"],
            int(data.get("count", -1)),
            tuple(int(n) for n in data.get("recent", ())),
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
    # Documents are read after this: a change committing meanwhile may be in them without being
    # counted here, and is then applied once more by the next catch-up (harmless).
    count, recent = storage.newest_change_numbers(session, window=FEED_WINDOW)
    return FeedPosition(count, max(recent, default=0), tuple(recent))


def _entry_documents(engine: Engine) -> tuple[FeedPosition, list[dict]]:
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
) -> IndexState:
    """Build a complete new generation beside the serving one, then swap CURRENT to it."""
    index_dir.mkdir(parents=True, exist_ok=True)
    generation = index_dir / f"gen-{time.time_ns()}-{os.getpid()}"
    generation.mkdir()
    try:
        position, docs = documents(engine)
        ix = _storage(generation).create_index(build_schema(cjk))
        writer = ix.writer(limitmb=256, procs=1)
        try:
            for doc in docs:
                writer.add_document(**doc)
        except BaseException:
            writer.cancel()
            raise
        writer.commit()
        ix.close()
        stamp = _now()
        state = IndexState(generation, position.seq, stamp, stamp, position.count, position.recent)
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


def _remove_stale_generations(index_dir: Path, keep: str) -> None:
    """Remove complete generations older than `keep`, and builds abandoned long ago. A build
    still under way (no state.json yet) may be another process's, and is left alone.

    Open readers of an old generation keep working on POSIX: their files stay until closed.
    """
    newest = _generation_stamp(keep)
    for child in index_dir.glob("gen-*"):
        if child.name == keep or _generation_stamp(child.name) >= newest:
            continue
        complete = (child / STATE_FILE).exists()
        age_s = (time.time_ns() - _generation_stamp(child.name)) / 1e9
        if complete or age_s > ABANDONED_BUILD_S:
            shutil.rmtree(child, ignore_errors=True)


def update_index(engine: Engine, index_dir: Path) -> IndexState:
    """Apply every change the index has not applied; rebuild when there is no usable index, or
    when the changes applied do not add up to the feed (see the module's docstring)."""
    state = read_state(index_dir)
    if state is None or state.count < 0:
        return rebuild_index(engine, index_dir)
    with Session(engine) as session:
        mark = storage.feed_mark(session)
        if mark == state.mark:
            return state
        applied = set(state.recent)
        window, total = storage.changes_and_count(session, seq=max(0, state.seq - FEED_WINDOW))
        changes = [c for c in window if c.seq > state.seq or c.seq not in applied]
        if state.count + len(changes) != total:
            logger.warning(
                "search index: %d changes applied of %d in the feed; rebuilding",
                state.count + len(changes),
                total,
            )
            return rebuild_index(engine, index_dir)
        entry_ids = list(dict.fromkeys(change.entry_id for change in changes))
        entries = storage.get_entries(session, entry_ids=entry_ids)
        documents = {
            entry_id: document_for(entry, storage.entry_signatures(session, entry_id=entry_id))
            for entry_id, entry in entries.items()
            if not entry.archived
        }
    ix = _storage(state.generation).open_index()
    try:
        writer = ix.writer(timeout=0)
    except LockError:
        ix.close()
        return state  # another process is applying the same changes right now
    try:
        for entry_id in entry_ids:
            if entry_id in documents:
                writer.update_document(**documents[entry_id])
            else:
                writer.delete_by_term("id", entry_id)
    except BaseException:
        writer.cancel()
        ix.close()
        raise
    writer.commit()
    ix.close()
    new_seq = max(state.seq, *(c.seq for c in changes))
    recent = sorted(n for n in applied | {c.seq for c in changes} if n > new_seq - FEED_WINDOW)
    new_state = IndexState(
        state.generation,
        new_seq,
        state.built_at,
        _now(),
        state.count + len(changes),
        tuple(recent),
    )
    _write_atomic(state.generation / STATE_FILE, new_state.to_json())
    return new_state
