"""Getting a data dir ready: schema upgraded, content ingested, index current.

`pitfalls serve`, `pitfalls ingest` and the app's start-up all go through here, so a fresh clone
needs no set-up command of its own.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.ingest import IngestReport, ingest_content
from app.search_index import IndexState, update_index
from app.settings import Settings
from app.shipped_results import SHIPPED_RESULTS_NAME, load_shipped_results


@dataclass
class PrepareReport:
    ingest: IngestReport | None
    index: IndexState


def database_is_empty(engine: Engine) -> bool:
    with Session(engine) as session:
        return storage.current_change_seq(session) == 0


def prepare_data(
    settings: Settings,
    engine: Engine,
    *,
    ingest: Literal["always", "if-empty", "never"] = "always",
    prune: bool = False,
    force: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> PrepareReport:
    """Upgrade the schema, sync content/ as asked, and bring the index up to the database."""
    storage.upgrade_schema(engine)
    report = None
    if ingest == "always" or (ingest == "if-empty" and database_is_empty(engine)):
        assert settings.content_dir is not None
        report = ingest_content(
            engine, settings.content_dir, prune=prune, force=force, on_progress=on_progress
        )
    if settings.content_dir is not None:
        # Results shipped next to the entries, for snippets whose code is still the same.
        load_shipped_results(engine, settings.content_dir / SHIPPED_RESULTS_NAME)
    assert settings.index_dir is not None
    return PrepareReport(ingest=report, index=update_index(engine, settings.index_dir))
