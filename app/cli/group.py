"""What every `pitfalls` command shares: the group, the settings, the database, and the
exit code 2 of a command that could not run."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from app import __version__
from app.settings import Settings, SettingsError, load_settings


class CannotRun(click.ClickException):
    """The command could not run at all (exit 2), as opposed to finding problems (exit 1)."""

    exit_code = 2


def _settings() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        raise CannotRun(str(exc)) from None


def _content_dir(settings: Settings) -> Path:
    assert settings.content_dir is not None  # filled in when the settings are read
    return settings.content_dir


def _index_dir(settings: Settings) -> Path:
    assert settings.index_dir is not None  # filled in when the settings are read
    return settings.index_dir


@contextmanager
def _database() -> Iterator:
    """The configured database with its schema up to date."""
    from app.storage import create_db_engine, upgrade_schema

    engine = create_db_engine(_settings())
    upgrade_schema(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pitfalls")
def cli() -> None:
    """A searchable knowledge base of PyTorch pitfalls."""
