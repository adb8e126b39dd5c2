"""`pitfalls check`, `ingest` and `export`: the content folder, the database and back."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from app.cli.group import CannotRun, _content_dir, _database, _settings, _settings_to_read, cli

PROGRESS_MIN_FILES = 50


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
def check(paths: tuple[Path, ...], strict: bool) -> None:
    """Check entry files (default: the content folder); report problems as file:line: message."""
    from app.checker import check_paths
    from app.local_cache import SiblingCache

    targets = list(paths) or [_content_dir(_settings_to_read())]
    try:  # the files beside the checked ones are remembered in the data dir, when it has one
        settings = _settings_to_read()
        memo: SiblingCache | None = SiblingCache(settings.data_dir / "cache" / "cli-check.marshal")
    except CannotRun:  # bad settings: check the files all the same
        memo = None
    report = check_paths(targets, memo)
    if memo is not None:
        memo.save()
    for problem in report.problems:
        click.echo(str(problem))
    failed = bool(report.errors) or (strict and bool(report.warnings))
    summary = (
        f"checked {len(report.docs)} file(s): {len(report.errors)} error(s), "
        f"{len(report.warnings)} warning(s)"
    )
    click.echo(summary, err=True)
    sys.exit(1 if failed else 0)


@contextmanager
def _progress(total: int, label: str) -> Iterator:
    """A progress bar on a terminal for long runs; silent otherwise (CI logs stay short)."""
    if total < PROGRESS_MIN_FILES or not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield lambda _name: bar.update(1)


@cli.command()
@click.option("--prune", is_flag=True, help="Delete entries whose file is gone (default: archive).")
@click.option(
    "--force", is_flag=True, help="Take the file even where the entry was edited in the wiki."
)
def ingest(prune: bool, force: bool) -> None:
    """Sync the content folder into the database and update the search index.

    An entry edited in the wiki since its file was last ingested is never overwritten: if the file
    changed too, it is reported as a conflict (exit 1) until merged or taken with --force.
    """
    from app.bootstrap import prepare_data
    from app.checker import collect_entry_files
    from app.storage import create_db_engine

    settings = _settings()
    content_dir = _content_dir(settings)
    engine = create_db_engine(settings)
    total = len(collect_entry_files([content_dir])) if content_dir.is_dir() else 0
    with _progress(total, "ingest") as on_progress:
        report = prepare_data(
            settings, engine, prune=prune, force=force, on_progress=on_progress
        ).ingest
    engine.dispose()
    assert report is not None  # ingest="always"
    for problem in report.problems:
        click.echo(str(problem), err=True)
    click.echo(report.summary_line())
    sys.exit(1 if report.failed else 0)


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def export(directory: Path) -> None:
    """Write every active entry back as DIRECTORY/<id>.md (commit browser edits to git).

    Entries never edited in the wiki come out byte for byte as they were ingested; files that
    are already right are left untouched.
    """
    from app.ingest import export_entries

    with _database() as engine:
        report = export_entries(engine, directory)
    for entry_id in report.written:
        click.echo(f"wrote {directory / (entry_id + '.md')}")
    click.echo(report.summary_line())
