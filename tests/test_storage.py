"""The schema comes only from the migrations, and equals the models; SQLite is set up safely."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel

from app.models import Signature
from app.storage import (
    alembic_config,
    head_revision,
    schema_is_current,
    upgrade_schema,
)

pytestmark = pytest.mark.both_databases


def test_migrations_produce_exactly_the_models_schema(engine):
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, SQLModel.metadata) == []


def test_upgrade_is_idempotent_and_at_head(engine):
    upgrade_schema(engine)
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with engine.connect() as connection:
        assert MigrationContext.configure(connection).get_current_revision() == head
    assert {"entry", "signature", "snippet", "revision", "change"} <= set(
        inspect(engine).get_table_names()
    )


def test_a_reader_sees_the_schema_is_current_without_alembic(engine):
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head_revision() == head
    assert schema_is_current(engine)
    with engine.begin() as connection:  # one migration behind: not current
        connection.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    assert not schema_is_current(engine)
    with engine.begin() as connection:  # never migrated: no table at all
        connection.execute(text("DROP TABLE alembic_version"))
    assert not schema_is_current(engine)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_runs_in_wal_mode_with_foreign_keys_and_busy_timeout(engine, settings):
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
        busy = connection.execute(text("PRAGMA busy_timeout")).scalar()
        assert busy == settings.sqlite_busy_timeout_ms


def test_foreign_keys_are_enforced(engine):
    with Session(engine) as session:
        session.add(Signature(entry_id="nope", position=0, message="x", example="x"))
        with pytest.raises(IntegrityError):
            session.commit()
