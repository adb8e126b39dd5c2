"""Data dirs of the repository's entries, prepared once per session and copied per test.

In a module of its own (not conftest.py): pytest may load conftest under another module name
than the tests' `from tests.conftest import ...`, and the cache must be one for both.
"""

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from app.settings import Settings, load_settings
from app.storage import create_db_engine

# A data dir of the repository's entries (database and index) is built once per session for
# each set-up (search engine, content) and copied for each test that asks for one: the copy is
# exactly what the first start would make (the app then finds the database full and the index
# current), in a second instead of the 10-25 s of ingesting and indexing every entry again.
_PREPARED: dict[tuple[str, ...], Path] = {}


def _content_key(content: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(content.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(content).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def prepare_data_dir(settings: Settings, factory: pytest.TempPathFactory) -> None:
    """Fill `settings.data_dir` (not there yet) with a copy of a prepared one; a PostgreSQL
    database, or a data dir already there, is left to the app's own first start."""
    data_dir, content = settings.data_dir, settings.content_dir
    if not settings.database_url.startswith("sqlite:") or data_dir.exists() or content is None:
        return
    if settings.database_url != load_settings(data_dir=data_dir).database_url:
        return  # a database file of its own choosing: not ours to fill
    key = (settings.search_engine, _content_key(content))
    template = _PREPARED.get(key)
    if template is None:
        template = _shared_template(settings, factory, key)
        _PREPARED[key] = template
    shutil.copytree(template, data_dir)


def _shared_template(settings: Settings, factory: pytest.TempPathFactory, key) -> Path:
    """The prepared data dir for `key`, built by the first of the run's processes to ask:
    pytest-xdist's workers share the parent of their temporary folders, and a lock file there
    makes the others wait for that build instead of each building its own."""
    from app.bootstrap import prepare_data

    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / f"prepared-{settings.search_engine}-{key[1][:16]}"
    folder.mkdir(exist_ok=True)
    template, done = folder / "data", folder / "done"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(template, ignore_errors=True)  # a build that died half-way
            shaped = settings.model_copy(
                update={
                    "data_dir": template,
                    "database_url": load_settings(data_dir=template).database_url,
                    "index_dir": template / "index",
                }
            )
            engine = create_db_engine(shaped)
            try:
                prepare_data(shaped, engine, ingest="always")
            finally:
                engine.dispose()
            done.touch()
    return template
