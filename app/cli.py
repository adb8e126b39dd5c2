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


def _answer(text: str, server: str | None) -> dict:
    """The /api/v1/match answer for `text`: from a running server, or computed here."""
    if server:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            server.rstrip("/") + "/api/v1/match",
            data=text.encode("utf-8"),
            headers={"Content-Type": "text/plain; charset=utf-8"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise CannotRun(f"the server answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise CannotRun(f"cannot reach {server}: {exc}") from None
    from sqlmodel import Session

    from app.answers import answer_paste
    from app.bootstrap import prepare_data
    from app.matching import SignatureMatcher
    from app.search import SearchService
    from app.storage import active_signature_records, create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    prepare_data(settings, engine, ingest="if-empty")
    with Session(engine) as session:
        matcher = SignatureMatcher(active_signature_records(session))
    search = SearchService(settings.index_dir, engine)
    try:
        text = text[-settings.max_paste_bytes :]
        return answer_paste(text, engine=engine, matcher=matcher, search=search).model_dump()
    finally:
        search.close()
        engine.dispose()


def _print_answer(answer: dict, err: bool = False) -> None:
    click.echo(answer["message"], err=err)
    for match in answer["matches"]:
        why = match["why"]
        click.echo(f"\n  {match['title']}  [{match['id']}, {match['confidence']:.0%}]", err=err)
        click.echo(f"  matched: {why['matched_text']}", err=err)
        for name, value in match["captures"].items():
            click.echo(f"  {name.replace('_', ' ')}: {value}", err=err)
        if match["fix_markdown"]:
            click.echo("\n  Fix:", err=err)
            for line in match["fix_markdown"].splitlines():
                click.echo(f"    {line}", err=err)
        click.echo(f"  more: {match['url']}", err=err)
    if answer["related"]:
        click.echo("\nRelated by text, not a known match:", err=err)
        for related in answer["related"]:
            click.echo(f"  {related['id']:<36} {related['title']}", err=err)


@cli.command()
@click.argument("source", default="-", type=click.File("rb"))
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server instead.")
def match(source, as_json: bool, server: str | None) -> None:
    """Explain a traceback from FILE (or standard input): exit 0 when a known pitfall matched,
    1 when none did, 2 on error."""
    text = source.read().decode("utf-8", errors="replace")
    answer = _answer(text, server)
    if as_json:
        click.echo(json.dumps(answer, ensure_ascii=False, indent=2, default=str))
    else:
        _print_answer(answer)
    sys.exit(0 if answer["matches"] else 1)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server instead.")
def run(command: tuple[str, ...], server: str | None) -> None:
    """Run COMMAND with its output passed through; when it fails, show the matching pitfalls.

    Exits with the command's own exit code. Put `--` before the command:
    pitfalls run -- python train.py
    """
    import subprocess
    import threading
    from collections import deque

    tail: deque[bytes] = deque()
    size = [0]
    limit = 1_000_000
    lock = threading.Lock()

    def pump(stream, sink) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            sink.write(chunk)
            sink.flush()
            with lock:
                tail.append(chunk)
                size[0] += len(chunk)
                while size[0] > limit and len(tail) > 1:
                    size[0] -= len(tail.popleft())

    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        click.echo(f"pitfalls run: cannot start {command[0]}: {exc.strerror}", err=True)
        sys.exit(127)
    threads = [
        threading.Thread(target=pump, args=(process.stdout, sys.stdout.buffer), daemon=True),
        threading.Thread(target=pump, args=(process.stderr, sys.stderr.buffer), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.send_signal(2)
        code = process.wait()
    for thread in threads:
        thread.join()
    if code != 0:
        text = b"".join(tail).decode("utf-8", errors="replace")
        click.echo("\n--- pitfalls ---", err=True)
        _print_answer(_answer(text, server), err=True)
    sys.exit(code)


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
