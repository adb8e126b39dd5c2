"""`pitfalls verify`: every snippet run, inside the sandbox where it works."""

import json
import sys
from pathlib import Path

import click

from app.cli.group import CannotRun, _settings, cli


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
@click.option(
    "--memory-mb",
    default=4096,
    show_default=True,
    type=click.IntRange(256),
    help="Memory of each process of a snippet (its address space).",
)
@click.option(
    "--total-memory-mb",
    default=8192,
    show_default=True,
    type=click.IntRange(256),
    help="Memory of a snippet's processes together; past it the snippet is stopped.",
)
@click.option(
    "--max-processes",
    default=512,
    show_default=True,
    type=click.IntRange(8),
    help="Processes of a snippet at once, threads included; past it the snippet is stopped.",
)
@click.option("--python", default=sys.executable, show_default="this interpreter")
@click.option(
    "--include-wiki",
    is_flag=True,
    help="Also run entries edited in the wiki since ingest (inside the sandbox).",
)
@click.option(
    "--unsafe-no-sandbox",
    is_flag=True,
    help="Where no sandbox works, run wiki snippets anyway as plain subprocesses of yours.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also merge the results that ran into this JSON file, e.g. content/verification.json: "
    "the results a fresh data dir shows on first start.",
)
def verify(
    entry_ids: tuple[str, ...],
    as_json: bool,
    jobs: int,
    timeout_s: float,
    memory_mb: int,
    total_memory_mb: int,
    max_processes: int,
    python: str,
    include_wiki: bool,
    unsafe_no_sandbox: bool,
    record: Path | None,
) -> None:
    """Run every snippet: a repro must fail with its own entry's error, a fix or demo exit 0.

    Snippets run inside a bubblewrap sandbox (no data dir, home, secrets or network) when it works
    here. By default only entries as their content file has them run; --include-wiki adds the
    ones edited in the wiki, which without a working sandbox also need --unsafe-no-sandbox.
    """
    from sqlalchemy.engine import make_url

    from app.bootstrap import prepare_data
    from app.sandbox import choose_runner
    from app.storage import create_db_engine
    from app.verification import (
        CannotVerify,
        SandboxRequired,
        WikiEntriesNamed,
        summary_line,
        verify_entries,
    )
    from app.verification.snippets import Environment, SnippetResult

    settings = _settings()
    keep_out = [settings.data_dir, settings.index_dir]
    database = make_url(settings.database_url).database
    if settings.is_sqlite and database:
        keep_out.append(Path(database).parent)
    runner = choose_runner(python, keep_out=[p for p in keep_out if p is not None])
    engine = create_db_engine(settings)
    prepare_data(settings, engine)

    def started(env: Environment, count: int) -> None:
        click.echo(f"verifying {count} snippet(s) with {env.description}", err=True)
        click.echo(f"snippets run {runner.description}", err=True)

    def show(result: SnippetResult) -> None:
        where = f"{result.snippet.label} (line {result.snippet.line})"
        detail = f": {result.reason}" if result.reason else f" ({result.duration_ms} ms)"
        click.echo(f"{result.status:<8} {where}{detail}", err=as_json)

    try:
        run = verify_entries(
            engine,
            entry_ids=entry_ids,
            include_wiki=include_wiki,
            unsafe_no_sandbox=unsafe_no_sandbox,
            runner=runner,
            python=python,
            jobs=jobs,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            total_memory_mb=total_memory_mb,
            max_processes=max_processes,
            on_start=started,
            on_result=None if as_json else show,
        )
    except WikiEntriesNamed as exc:
        raise CannotRun(f"{exc}: add --include-wiki to run their snippets (sandboxed)") from None
    except SandboxRequired as exc:
        raise CannotRun(
            f"{exc}. Refusing: their code comes from the wiki or the API, and unsandboxed it "
            "could read your files, the data dir and its secret key. Install bubblewrap (the "
            "Debian package), leave them out (no --include-wiki), or accept the risk with "
            "--unsafe-no-sandbox."
        ) from None
    except CannotVerify as exc:
        raise CannotRun(str(exc)) from None
    finally:
        engine.dispose()
    if run.left_out:
        click.echo(
            f"left out {len(run.left_out)} entr{'y' if len(run.left_out) == 1 else 'ies'} edited "
            f"in the wiki ({', '.join(run.left_out)}): run them with --include-wiki",
            err=True,
        )
    if record is not None:
        from app.shipped_results import write_records
        from app.verification import verification_rows

        held = write_records(record, verification_rows(run.results, run.environment))
        click.echo(f"recorded the results that ran in {record} ({held} held)", err=True)
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2))
    else:
        click.echo(f"verify: {summary_line(run.results)}")
    sys.exit(1 if run.failed else 0)
