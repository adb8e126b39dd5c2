"""First-start snapshots: what a first start made from a set of entries, kept for the next one.

A first start on a fresh SQLite data dir spends nearly all its time turning the same entries
into the same rows and the same index. After such a start, the database (as `VACUUM INTO`
writes it) and the index generation are kept in the snapshot folder under a key, and a later
first start whose key is the same copies them instead, then runs the ordinary preparation over
them, which finds every file unchanged and the index current.

The key is a digest of everything the result depends on: every file of the entries folder, the
package's own code and data (parsing, rendering, indexing), the migrations, the search engine,
and this format. A different key is a miss, never a near match. A snapshot holds only what the
entries make (entries, revisions, signatures, snippets, the change feed, shipped verification
results): one in which any other table has a row (an account, a token, a secret) is not kept.
What differs from a slow start is only time: rows are dated when the snapshot was made.

A snapshot may also ship with the installation (`pitfalls snapshot`, run where a wheel or an
image is built): the package's own first-start folder is then looked in after the user's, with
the same key, so a machine's very first start of the shipped entries copies too. The folder
itself is left out of the key.

Every step here may fail without harm: a snapshot that cannot be read or written leaves the
ordinary path to do the work.
"""

import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from app import __version__
from app.models import Change, Entry, Revision, Signature, Snippet, Verification
from app.resources import resource_dir
from app.settings import Settings

logger = logging.getLogger("pitfalls")

FORMAT = 1
DATABASE_NAME = "pitfalls.db"
INDEX_NAME = "index"
ABOUT_NAME = "snapshot.json"
# The tables the entries fill; a snapshot with a row in any other table is not kept.
CONTENT_TABLES = {
    str(model.__tablename__)
    for model in (Entry, Signature, Snippet, Revision, Change, Verification)
} | {"alembic_version"}
_CODE_SUFFIXES = (".py", ".json", ".txt")
_KEY_NAME = re.compile(r"[0-9a-f]{64}")
SHIPPED_NAME = "first-start"  # the package's folder of shipped snapshots
# Folders a wheel carries inside the package and a clone keeps beside it, left out of the code's
# part of the key so that both layouts of the same release have one key: the entries and the
# migrations count on their own, templates and static files make no row, and the shipped
# snapshots are what the key names, not what it is made of.
_NOT_CODE = {"content", "migrations", "templates", "static", SHIPPED_NAME}


@dataclass(frozen=True)
class Snapshot:
    folder: Path
    made_at: str


def shipped_snapshot_dir() -> Path:
    """The installation's own snapshot folder (inside the package, in a clone as in a wheel)."""
    return Path(__file__).resolve().parent / SHIPPED_NAME


def database_file(settings: Settings) -> Path | None:
    """The SQLite database's file, or None for PostgreSQL or a database in memory."""
    url = make_url(settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def is_fresh(settings: Settings) -> bool:
    """A data dir that holds no database yet (nor its journal) and no index."""
    database = database_file(settings)
    if database is None or settings.index_dir is None:
        return False
    journal = [database.with_name(database.name + suffix) for suffix in ("-wal", "-shm")]
    return (
        not any(path.exists() for path in (database, *journal))
        and not (settings.index_dir / "CURRENT").exists()
    )


def snapshot_key(settings: Settings) -> str:
    """The digest that names the snapshot of a first start with these settings and this code;
    empty when a file cannot be read (then no snapshot is used or kept)."""
    try:
        return _digest(settings)
    except OSError as exc:
        logger.info("no first-start snapshot: %s", exc)
        return ""


def _digest(settings: Settings) -> str:
    assert settings.content_dir is not None
    digest = hashlib.sha256(f"pitfalls {__version__} format {FORMAT}\0".encode())
    digest.update(f"engine {settings.search_engine}\0".encode())
    package = Path(__file__).resolve().parent
    roots = [
        ("content", settings.content_dir, None),
        ("code", package, _CODE_SUFFIXES),
        ("migrations", resource_dir("migrations") / "versions", (".py",)),
    ]
    for name, root, suffixes in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if name == "code" and path.relative_to(root).parts[0] in _NOT_CODE:
                continue
            if suffixes is not None and path.suffix not in suffixes:
                continue
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def find_snapshot(folder: Path, key: str) -> Snapshot | None:
    """The complete snapshot named `key` in `folder`, if there is one."""
    where = folder / key
    try:
        about = json.loads((where / ABOUT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if about.get("format") != FORMAT or about.get("key") != key:
        return None
    if not (where / DATABASE_NAME).is_file() or not (where / INDEX_NAME).is_dir():
        return None
    return Snapshot(where, str(about.get("made_at", "")))


def remove_other_snapshots(folder: Path, *, keep: str) -> list[str]:
    """Remove the snapshots in `folder` not named `keep` (only folders named as a key is, so
    nothing else a person put there); the names removed."""
    removed = []
    for path in sorted(folder.iterdir()):
        if path.name != keep and _KEY_NAME.fullmatch(path.name) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def install_snapshot(settings: Settings, snapshot: Snapshot) -> bool:
    """Copy `snapshot` into the fresh data dir of `settings` (under the set-up lock: nobody has
    the database open). Each part lands under a temporary name and is then renamed, so a start
    killed half-way leaves either nothing or a whole file. False when it could not be done."""
    from app.search.index import CURRENT_FILE

    database = database_file(settings)
    assert database is not None and settings.index_dir is not None
    generation = settings.index_dir / f"gen-{time.time_ns()}-{os.getpid()}"
    partial = database.with_name(database.name + ".snapshot-part")
    placed = False
    try:
        settings.index_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(snapshot.folder / INDEX_NAME, generation)
        shutil.copyfile(snapshot.folder / DATABASE_NAME, partial)
        os.replace(partial, database)
        placed = True
        (settings.index_dir / CURRENT_FILE).write_text(generation.name + "\n", encoding="utf-8")
    except OSError as exc:
        logger.info("first-start snapshot %s not used: %s", snapshot.folder, exc)
        partial.unlink(missing_ok=True)
        shutil.rmtree(generation, ignore_errors=True)
        if placed:
            database.unlink(missing_ok=True)  # a database without its index: start over
        return False
    return True


def keep_snapshot(settings: Settings, folder: Path, key: str) -> bool:
    """After a first start that ingested every entry cleanly: keep its database and index
    under `key` (unless the entries or the code changed meanwhile, or something other than
    the entries wrote to the database). False when nothing was kept."""
    from app.search.index import read_state

    database = database_file(settings)
    assert database is not None and settings.index_dir is not None
    state = read_state(settings.index_dir, settings.search_engine)
    if state is None or find_snapshot(folder, key) is not None:
        return False
    part = folder / f".{key}.{os.getpid()}.part"
    try:
        part.mkdir(parents=True)
        copy = part / DATABASE_NAME
        with sqlite3.connect(database) as connection:
            connection.execute("VACUUM INTO ?", (str(copy),))
        if not _only_entries(copy, (state.count, state.seq)):
            shutil.rmtree(part, ignore_errors=True)
            return False
        shutil.copytree(state.generation, part / INDEX_NAME)
        if snapshot_key(settings) != key:
            shutil.rmtree(part, ignore_errors=True)
            return False  # a file changed while this start read them
        made_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        about = {"format": FORMAT, "key": key, "made_at": made_at, "version": __version__}
        (part / ABOUT_NAME).write_text(json.dumps(about) + "\n", encoding="utf-8")
        os.replace(part, folder / key)
    except OSError as exc:
        logger.info("first-start snapshot not kept in %s: %s", folder, exc)
        shutil.rmtree(part, ignore_errors=True)
        return False
    return True


def _only_entries(copy: Path, index_mark: tuple[int, int]) -> bool:
    """Whether the copied database holds rows only in the entries' tables, and its change feed
    stands where the index does (nothing wrote between the ingest and the index build)."""
    connection = sqlite3.connect(copy)
    try:
        tables = [
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        for table in tables:
            if table in CONTENT_TABLES or table.startswith("sqlite_"):
                continue
            if connection.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone() is not None:
                return False
        count, seq = connection.execute(
            f'SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM "{Change.__tablename__}"'
        ).fetchone()
    finally:
        connection.close()
    return (count, seq) == index_mark
