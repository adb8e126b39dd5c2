"""What every `pitfalls` command shares: the group, the settings, the database, and the
exit code 2 of a command that could not run."""

import contextlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from app import __version__

if TYPE_CHECKING:  # pydantic-settings is imported by the commands that read settings
    from app.settings import Settings


class CannotRun(click.ClickException):
    """The command could not run at all (exit 2), as opposed to finding problems (exit 1)."""

    exit_code = 2


def _settings() -> "Settings":
    from app.settings import SettingsError, load_settings

    try:
        return load_settings()
    except SettingsError as exc:
        raise CannotRun(str(exc)) from None


def _content_dir(settings: "Settings") -> Path:
    assert settings.content_dir is not None  # filled in when the settings are read
    return settings.content_dir


def _index_dir(settings: "Settings") -> Path:
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


class _Commands(click.Group):
    """The group; a reader that went away (`pitfalls match … | head -2`) ends the command
    quietly with exit 0, as `cat` or `grep` would, instead of a traceback or exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            reader_gone()


def reader_gone() -> NoReturn:
    """Exit 0 with standard output pointed at the null device: the interpreter's last flush
    then has nowhere to fail."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pitfalls")
def cli() -> None:
    """A searchable knowledge base of PyTorch pitfalls."""
