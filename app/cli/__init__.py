"""`pitfalls …`: the command line for people at a terminal and for CI jobs.

Exit codes: 0 success, 1 the command ran and found problems (bad entries, broken files),
2 it could not run (bad settings or arguments).
"""

import sys

import click

# Each module adds its commands to the group when the group first asks for one of them
# (app.cli.group.COMMAND_MODULES): a command imports only what it uses.
from app.cli.group import CannotRun, cli, reader_gone

__all__ = ["CannotRun", "cli", "main"]


def main() -> None:
    try:
        cli()
    except BrokenPipeError:
        reader_gone()
    except Exception as exc:
        # A start that failed for a reason the operator can fix is one sentence and exit 2.
        from app.bootstrap import startup_problem
        from app.settings import SettingsError, load_settings

        try:
            settings = load_settings()
        except SettingsError:
            raise exc from None
        problem = startup_problem(exc, settings)
        if problem is None:
            raise
        click.echo(f"pitfalls: cannot start: {problem}", err=True)
        sys.exit(2)
