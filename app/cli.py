"""`pitfalls …`: the command line for people at a terminal and for CI jobs.

Exit codes: 0 success, 1 the command ran and found problems (bad entries, broken files),
2 it could not run (bad settings or arguments).
"""

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from app import __version__
from app.settings import Settings, SettingsError, load_settings

PROGRESS_MIN_FILES = 50


class CannotRun(click.ClickException):
    """The command could not run at all (exit 2), as opposed to finding problems (exit 1)."""

    exit_code = 2


def _settings() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        raise CannotRun(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pitfalls")
def cli() -> None:
    """A searchable knowledge base of PyTorch pitfalls."""


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
def check(paths: tuple[Path, ...], strict: bool) -> None:
    """Check entry files (default: the content folder); report problems as file:line: message."""
    from app.checker import check_paths

    targets = list(paths) or [_settings().content_dir]
    report = check_paths(targets)
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
def ingest(prune: bool) -> None:
    """Sync the content folder into the database and update the search index."""
    from app.bootstrap import prepare_data
    from app.checker import collect_entry_files
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    total = len(collect_entry_files([settings.content_dir])) if settings.content_dir.is_dir() else 0
    with _progress(total, "ingest") as on_progress:
        report = prepare_data(settings, engine, prune=prune, on_progress=on_progress).ingest
    engine.dispose()
    for problem in report.problems:
        click.echo(str(problem), err=True)
    click.echo(report.summary_line())
    sys.exit(1 if report.failed else 0)


@cli.command()
def reindex() -> None:
    """Rebuild the search index from the database (atomically: the old one serves until done)."""
    from app.search_index import rebuild_index
    from app.storage import create_db_engine, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    started = time.perf_counter()
    state = rebuild_index(engine, settings.index_dir)
    engine.dispose()
    elapsed = time.perf_counter() - started
    click.echo(f"reindexed in {elapsed:.2f} s (change sequence {state.seq})")


@cli.command()
@click.argument("query", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 200))
@click.option("--page", default=1, show_default=True, type=click.IntRange(1))
@click.option("--kind", help="Only entries of this kind.")
@click.option("--tag", help="Only entries with this tag.")
def search(
    query: tuple[str, ...], as_json: bool, limit: int, page: int, kind: str | None, tag: str | None
) -> None:
    """Search the knowledge base."""
    from app.bootstrap import prepare_data
    from app.search import SearchService
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    prepare_data(settings, engine, ingest="if-empty")
    service = SearchService(settings.index_dir, engine)
    result = service.search(" ".join(query), kind=kind, tag=tag, page=page, limit=limit)
    service.close()
    engine.dispose()
    if as_json:
        click.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return
    if result.suggestion:
        click.echo(f"did you mean: {result.suggestion}")
    click.echo(f"{result.total} result(s)" + (" (some words only)" if result.relaxed else ""))
    for hit in result.hits:
        click.echo(f"  {hit.id:<36} {hit.title}")


@cli.command()
@click.argument("entry_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--timeout",
    "timeout_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="Seconds per snippet, unless the snippet sets timeout=.",
)
@click.option("--memory-mb", default=4096, show_default=True, type=click.IntRange(256))
@click.option("--python", default=sys.executable, show_default="this interpreter")
def verify(
    entry_ids: tuple[str, ...],
    as_json: bool,
    jobs: int,
    timeout_s: float,
    memory_mb: int,
    python: str,
) -> None:
    """Run every snippet: a repro must fail with its own entry's error, a fix or demo exit 0."""
    from app.bootstrap import prepare_data
    from app.storage import create_db_engine
    from app.verification import UnknownEntries, summary_line, verify_entries

    settings = _settings()
    engine = create_db_engine(settings)
    prepare_data(settings, engine)

    def started(env, count: int) -> None:
        click.echo(f"verifying {count} snippet(s) with {env.description}", err=True)

    def show(result) -> None:
        where = f"{result.snippet.label} (line {result.snippet.line})"
        detail = f": {result.reason}" if result.reason else f" ({result.duration_ms} ms)"
        click.echo(f"{result.status:<8} {where}{detail}", err=as_json)

    try:
        run = verify_entries(
            engine,
            entry_ids=entry_ids,
            python=python,
            jobs=jobs,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            on_start=started,
            on_result=None if as_json else show,
        )
    except UnknownEntries as exc:
        raise CannotRun(str(exc)) from None
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2))
    else:
        click.echo(f"verify: {summary_line(run.results)}")
    sys.exit(1 if run.failed else 0)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--reload", is_flag=True, help="Restart when the code changes (development).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
def serve(host: str, port: int, reload: bool, workers: int) -> None:
    """Prepare the data dir (schema, content, index) and serve the web app and API."""
    import uvicorn

    from app.bootstrap import prepare_data
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    report = prepare_data(settings, engine)
    engine.dispose()
    for problem in report.ingest.problems:
        click.echo(str(problem), err=True)
    click.echo(report.ingest.summary_line(), err=True)
    click.echo(f"serving on http://{host}:{port}", err=True)
    uvicorn.run(
        "app.web:create_app",
        factory=True,
        host=host,
        port=port,
        reload=reload,
        workers=None if reload else workers,
    )


def main() -> None:
    cli()
