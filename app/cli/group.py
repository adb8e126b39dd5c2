"""What every `pitfalls` command shares: the group, the settings, the database, and the
exit code 2 of a command that could not run."""

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from app import __version__

if TYPE_CHECKING:  # pydantic-settings is imported by the commands that read settings
    from app.answer_sources import RemotePitfalls
    from app.quick_settings import QuickSettings
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


def _settings_to_read() -> "QuickSettings | Settings":
    """The settings for a short command that only reads them: without pydantic where that
    reads them the same (app.quick_settings), else `_settings()`; `full_settings()` of
    app.settings gives `Settings`."""
    from app.quick_settings import quick_settings

    return quick_settings() or _settings()


def _remote(server: str) -> "RemotePitfalls":
    """The server's API, with PITFALLS_TOKEN as the API token where it is set (a site whose
    reading is private needs one)."""
    from app.answer_sources import RemotePitfalls

    return RemotePitfalls(server, os.environ.get("PITFALLS_TOKEN") or None)


def _content_dir(settings: "QuickSettings | Settings") -> Path:
    assert settings.content_dir is not None  # filled in when the settings are read
    return settings.content_dir


def _index_dir(settings: "QuickSettings | Settings") -> Path:
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


# Which module of app/cli defines each command: a command's module is imported when the command
# is asked for, so `pitfalls match` never pays for the web server's or the accounts' imports.
COMMAND_MODULES = {
    "backup": "maintenance",
    "check": "content",
    "export": "content",
    "ingest": "content",
    "match": "answers",
    "mcp": "serving",
    "reindex": "maintenance",
    "restore": "maintenance",
    "run": "run",
    "search": "answers",
    "serve": "serving",
    "show": "show",
    "snapshot": "maintenance",
    "token": "accounts",
    "user": "accounts",
    "verify": "verification",
    "webhooks": "webhooks",
}


class _Commands(click.Group):
    """The group, loading each command's module on first use; a reader that went away
    (`pitfalls match … | head -2`) ends the command quietly with exit 0, as `cat` or `grep`
    would, instead of a traceback or exit 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULES, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            importlib.import_module(f"app.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def every_command(self) -> dict[str, click.Command]:
        """Every command by name, every command module imported (what the docs' test reads)."""
        for module in sorted(set(COMMAND_MODULES.values())):
            importlib.import_module(f"app.cli.{module}")
        return dict(sorted(self.commands.items()))

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
