"""What the CLI's short-lived commands need, kept in the data dir under the database's mark.

`pitfalls match` and `pitfalls show` answer in a process that lives for one command: importing
SQLAlchemy, reading every signature and compiling it cost far more than the answer. So what they
read is kept in `<data dir>/cache/cli-<name>.marshal`, built from the database by the slow path,
and trusted only under the same key: the content mark (the change feed's count and highest
number, the newest outcome report and verify result) and the schema version, read with the
standard library's sqlite3, and the stamp of this code's files. A missing, stale, damaged or
truncated file is rebuilt from the database, never trusted; deleting it is always safe. A
PostgreSQL database is not cached here (its callers take the slow path).

A file is MAGIC, the 32-byte blake2b digest of the body, then the body: marshal of builtins.
"""

import contextlib
import hashlib
import marshal
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from app import __version__
from app.files import write_atomically
from app.resources import resource_dir

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.answer_assembly import EntryFacts, EntryParts
    from app.matching.paste_matcher import PasteMatcher
    from app.quick_settings import QuickSettings
    from app.settings import Settings

MAGIC = b"pitfalls cli cache 1\n"
_DIGEST_SIZE = 32
_MARK_SQL = (
    "SELECT (SELECT count(*) FROM change), (SELECT coalesce(max(seq), 0) FROM change), "
    "(SELECT coalesce(max(id), 0) FROM outcome), (SELECT max(created_at) FROM outcome), "
    "(SELECT coalesce(max(id), 0) FROM verification), "
    "(SELECT group_concat(version_num) FROM alembic_version)"
)


def sqlite_file(database_url: str) -> Path | None:
    """The file of a plain SQLite URL (`sqlite:///path`), or None for anything else."""
    prefix = "sqlite:///"
    if not database_url.startswith(prefix) or "?" in database_url:
        return None
    name = database_url[len(prefix) :]
    return Path(name) if name and name != ":memory:" else None


def read_mark(database: Path) -> tuple | None:
    """The database's content mark and schema version, read-only; None when it cannot be read
    (no file yet, no tables yet): the slow path then prepares the database."""
    if not database.is_file():
        return None
    try:
        uri = f"file:{quote(str(database.resolve()))}?mode=ro"
        connection = sqlite3.connect(uri, uri=True, timeout=5)
        try:
            row = connection.execute(_MARK_SQL).fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return None
    return tuple(None if value is None else str(value) for value in row)


def _code_stamp() -> tuple:
    """Every module and migration file of this install, by name, size and time: data built by
    other code (another version, an edited checkout) is never read as this code's."""
    stamp = []
    for folder in (Path(__file__).resolve().parent, resource_dir("migrations") / "versions"):
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".json", ".txt")):
                    info = os.stat(os.path.join(root, name))
                    stamp.append((os.path.join(root, name), info.st_size, info.st_mtime_ns))
    return tuple(stamp)


def cache_key(settings: "QuickSettings | Settings") -> tuple | None:
    """What the cached data must have been built under; None: not cacheable (PostgreSQL, or a
    database that cannot be read yet)."""
    database = sqlite_file(settings.database_url)
    if database is None:
        return None
    mark = read_mark(database)
    if mark is None:
        return None
    return (__version__, str(database.resolve()), mark, _code_stamp())


def cache_path(settings: "QuickSettings | Settings", name: str) -> Path:
    return settings.data_dir / "cache" / f"cli-{name}.marshal"


def read_cache(path: Path, key: tuple) -> dict | None:
    """The data kept at `path` under `key`, or None (missing, other key, damaged)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    start = len(MAGIC) + _DIGEST_SIZE
    if len(blob) < start or not blob.startswith(MAGIC):
        return None
    body = blob[start:]
    if hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest() != blob[len(MAGIC) : start]:
        return None
    try:
        payload = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(payload, dict) or payload.get("key") != key:
        return None
    data = payload.get("data")
    return data if isinstance(data, dict) else None


def write_cache(path: Path, key: tuple, data: dict) -> None:
    """Keep `data` under `key`: written aside in the same folder, then swapped in."""
    body = marshal.dumps({"key": key, "data": data})
    blob = MAGIC + hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest() + body
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, blob)


def cached_data(
    settings: "QuickSettings | Settings", name: str, build: Callable[["Engine"], dict]
) -> dict | None:
    """`name`'s data for the database of `settings`: from the cache when it was built under the
    current key, else built from the database (prepared first, as `pitfalls match` prepares
    it) and kept. None for a database this does not cache (PostgreSQL): the caller's slow path.
    """
    if sqlite_file(settings.database_url) is None:
        return None
    path = cache_path(settings, name)
    key = cache_key(settings)
    if key is not None:
        data = read_cache(path, key)
        if data is not None:
            return data
    from app.bootstrap import prepare_to_read
    from app.settings import full_settings
    from app.storage import create_db_engine

    full = full_settings(settings)
    engine = create_db_engine(full)
    try:
        prepare_to_read(full, engine)
        key = cache_key(settings)  # read before the build: a write meanwhile rebuilds next time
        data = build(engine)
    finally:
        engine.dispose()
    if key is not None:
        with contextlib.suppress(OSError):  # a read-only data dir only costs the time
            write_cache(path, key, data)
    return data


# -- pitfalls match ------------------------------------------------------------------------


def build_match_data(engine: "Engine") -> dict:
    """Everything `match` reads: the matcher's input and each active entry's answer parts."""
    from sqlmodel import Session, select

    from app import storage
    from app.answers import entry_parts
    from app.matching.likely import documents_as_plain
    from app.matching.paste_matcher import PasteMatcher
    from app.models import Outcome
    from app.outcomes import stats

    with Session(engine) as session:
        texts = storage.active_entry_texts(session)
        matcher = PasteMatcher.build(storage.active_signature_records(session), texts)
        records = matcher.signatures.records  # only the patterns that compiled
        entries = storage.get_entries(session, entry_ids=[t.entry_id for t in texts])
        parts = {}
        for entry_id, entry in entries.items():
            got = entry_parts.get(session, entry)
            snippets = [(s.role, s.options, s.code, s.line) for s in got.snippets]
            parts[entry_id] = (got.fix_markdown, got.fix_html, snippets)
        outcomes = {}
        pairs = session.exec(select(Outcome.entry_id, Outcome.fingerprint).distinct()).all()
        for entry_id, fingerprint in pairs:
            for asked in (fingerprint, None):
                if (entry_id, asked) not in outcomes:
                    found = stats(session, entry_id, fingerprint=asked)
                    outcomes[(entry_id, asked)] = (
                        found.worked,
                        found.reports,
                        tuple(found.failed_notes),
                    )
    return {
        "signatures": [
            (r.entry_id, r.position, r.message, r.example, r.exception, r.frame, r.context)
            for r in records
        ],
        "specificities": matcher.signatures.specificities,
        "texts": [
            (
                t.entry_id,
                t.title,
                t.summary,
                t.aliases,
                t.symptoms,
                t.examples,
                tuple(sorted(t.exception_types)),
            )
            for t in texts
        ],
        "likely": documents_as_plain(matcher.likely),
        "entries": {
            e.id: (e.id, e.title, e.summary, e.kind, e.versions, e.archived)
            for e in entries.values()
        },
        "parts": parts,
        "outcomes": outcomes,
    }


def matcher_from(data: dict) -> "PasteMatcher":
    """The matcher `build_match_data` saw, without compiling a pattern until it is searched."""
    from app.matching.likely import EntryText, documents_from_plain
    from app.matching.paste_matcher import PasteMatcher
    from app.matching.signature_tier import SignatureMatcher, SignatureRecord

    records = [SignatureRecord(*row) for row in data["signatures"]]
    signatures = SignatureMatcher(records, specificities=data["specificities"])
    texts = [
        EntryText(i, title, summary, tuple(aliases), symptoms, tuple(examples), frozenset(types))
        for i, title, summary, aliases, symptoms, examples, types in data["texts"]
    ]
    return PasteMatcher(signatures, texts, saved=documents_from_plain(data["likely"]))


class CachedReads:
    """`answer_assembly.EntryReads` over `build_match_data`'s data."""

    def __init__(self, data: dict) -> None:
        self.data = data

    def entries(self, entry_ids: Sequence[str]) -> "dict[str, EntryFacts]":
        from app.answer_assembly import EntryFacts

        known = self.data["entries"]
        return {i: EntryFacts(*known[i]) for i in entry_ids if i in known}

    def parts(self, entry: Any) -> "EntryParts":
        from app.answer_assembly import EntryParts
        from app.plain_answers import SnippetOut

        fix_markdown, fix_html, snippets = self.data["parts"][entry.id]
        return EntryParts(
            fix_markdown,
            fix_html,
            tuple(
                SnippetOut(role=role, options=options, code=code, line=line)
                for role, options, code, line in snippets
            ),
        )

    def outcomes(self, entry_id: str, fingerprint: str | None) -> Any:
        from app.plain_answers import OutcomeStats

        found = self.data["outcomes"].get((entry_id, fingerprint))
        if found is None:
            return OutcomeStats()
        worked, reports, notes = found
        return OutcomeStats(worked=worked, reports=reports, failed_notes=list(notes))


def answer_from_cache(text: str, data: dict, matcher: "PasteMatcher | None" = None) -> dict:
    """The /api/v1/match answer to `text`, as `answers.answer_paste(...).model_dump()` gives it
    (`matcher`: `matcher_from(data)`, made once by a caller that answers more than once)."""
    from app.answer_assembly import assemble_plain_answer
    from app.tracebacks import parse_traceback

    parsed = parse_traceback(text)
    result = (matcher or matcher_from(data)).match(parsed)
    return assemble_plain_answer(text, parsed, result, CachedReads(data))


class CachedAnswers:
    """Answers for a process that lives longer than one command (the notebook hook) from the
    data dir's cache: read once, and read again when the database's mark or the code moves,
    so a change made meanwhile (an ingest, an edit) is in the next answer."""

    def __init__(self, settings: "QuickSettings | Settings") -> None:
        self.settings = settings
        self._load()

    def _load(self) -> None:
        key = cache_key(self.settings)  # before the read: a write meanwhile reloads next time
        data = cached_data(self.settings, "match", build_match_data)
        if data is None:
            raise ValueError("only a SQLite database's answers are kept in the data dir")
        from app.tracebacks import parse_traceback

        self._key, self._data, self._matcher = key, data, matcher_from(data)
        self._matcher.match(parse_traceback("RuntimeError: warm up\n"))  # patterns compiled now

    def match(self, text: str) -> dict:
        if self._key is None or cache_key(self.settings) != self._key:
            self._load()
        return answer_from_cache(text[-self.settings.max_paste_bytes :], self._data, self._matcher)


# -- pitfalls show -------------------------------------------------------------------------


def build_show_data(engine: "Engine") -> dict:
    """Every entry as `GET /api/v1/entries/ID` gives it (archived ones too: `show` says so)."""
    from sqlmodel import Session, col, select

    from app.entry_details import get_entry_details
    from app.models import Entry

    with Session(engine) as session:
        ids = session.exec(select(Entry.id).order_by(col(Entry.id))).all()
        entries = {}
        for entry_id in ids:
            details = get_entry_details(session, entry_id)
            if details is not None:
                entries[entry_id] = details.model_dump(mode="json")
    return {"entries": entries}


# -- pitfalls check ------------------------------------------------------------------------

MAX_SIBLINGS = 20_000  # files remembered; past that only the last check's are kept


class SiblingCache:
    """`checker.SiblingMemo` kept in the data dir: what `pitfalls check` read of the entry
    files beside the ones it checks, by their bytes, under this code's stamp (a file read by
    other checker code is read again)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.key = (__version__, _code_stamp())
        data = read_cache(path, self.key) or {}
        known = data.get("facts")
        self._known: dict[bytes, tuple] = known if isinstance(known, dict) else {}
        self._used: dict[bytes, tuple] = {}
        self._added = False

    def get(self, key: bytes):
        from app.checker import SiblingFacts

        plain = self._known.get(key)
        if plain is None:
            return None
        try:
            facts = SiblingFacts.from_plain(plain)
        except (TypeError, ValueError):
            return None  # another shape: read the file again
        self._used[key] = plain
        return facts

    def put(self, key: bytes, facts) -> None:
        self._used[key] = facts.plain()
        self._added = True

    def save(self) -> None:
        """Keep what this check read (a read-only data dir only costs the time next run)."""
        if not self._added:
            return
        merged = {**self._known, **self._used}
        facts = merged if len(merged) <= MAX_SIBLINGS else self._used
        with contextlib.suppress(OSError):
            write_cache(self.path, self.key, {"facts": facts})
