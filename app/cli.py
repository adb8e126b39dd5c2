"""`pitfalls …`: the command line for people at a terminal and for CI jobs.

Exit codes: 0 success, 1 the command ran and found problems (bad entries, broken files),
2 it could not run (bad settings or arguments).
"""

import contextlib
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


def _content_dir(settings: Settings) -> Path:
    assert settings.content_dir is not None  # filled in when the settings are read
    return settings.content_dir


def _index_dir(settings: Settings) -> Path:
    assert settings.index_dir is not None  # filled in when the settings are read
    return settings.index_dir


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

    targets = list(paths) or [_content_dir(_settings())]
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
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def backup(file: Path) -> None:
    """Save every table (entries, revisions, users, tokens, sessions, audit log, verification
    results) to FILE as one consistent snapshot, while the server keeps serving. The file is
    gzip JSON lines and restores into SQLite or PostgreSQL alike."""
    from app.backup import backup as save
    from app.storage import create_db_engine, setup_lock, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    with setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
        upgrade_schema(engine)
    started = time.perf_counter()
    counts = save(engine, file)
    engine.dispose()
    rows = sum(counts.values())
    click.echo(
        f"backed up {rows} rows of {len(counts)} tables to {file} "
        f"in {time.perf_counter() - started:.2f} s"
    )


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--accept-unverified",
    is_flag=True,
    help="Also restore a backup made before backups carried an end marker and checksum "
    "(version 1), which cannot be told from one cut short: only once you know it is whole.",
)
def restore(file: Path, accept_unverified: bool) -> None:
    """Load a backup FILE into an empty database (a new data dir, or a new PostgreSQL
    database), then build the search index. A database that holds anything is refused, and so
    is a file that does not add up (cut short, damaged, changed): nothing is written then."""
    from app.backup import BackupError
    from app.backup import restore as load
    from app.search.index import rebuild_index
    from app.storage import create_db_engine, setup_lock, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    try:
        with setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
            upgrade_schema(engine)
            counts = load(engine, file, accept_unverified=accept_unverified)
        state = rebuild_index(engine, _index_dir(settings), search_engine=settings.search_engine)
    except BackupError as exc:
        raise CannotRun(str(exc)) from None
    finally:
        engine.dispose()
    click.echo(
        f"restored {sum(counts.values())} rows of {len(counts)} tables; "
        f"index built at change {state.seq}"
    )


@cli.command()
def reindex() -> None:
    """Rebuild the search index from the database (atomically: the old one serves until done)."""
    from app.search.index import rebuild_index
    from app.storage import create_db_engine, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    started = time.perf_counter()
    state = rebuild_index(engine, _index_dir(settings), search_engine=settings.search_engine)
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
    service = SearchService(_index_dir(settings), engine, search_engine=settings.search_engine)
    result = service.search(" ".join(query), kind=kind, tag=tag, page=page, limit=limit)
    service.close()
    engine.dispose()
    if as_json:
        click.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return
    if result.corrected_from:
        click.echo(f"showing results for: {result.query} (typed: {result.corrected_from})")
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
        Environment,
        SandboxRequired,
        SnippetResult,
        WikiEntriesNamed,
        summary_line,
        verify_entries,
    )

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


def _answer(text: str, server: str | None) -> dict:
    """The /api/v1/match answer for `text`: from a running server, or computed here."""
    if server:
        from app.answer_sources import RemotePitfalls, SourceError

        try:
            return RemotePitfalls(server).match(text)
        except SourceError as exc:
            raise CannotRun(str(exc)) from None
    from sqlmodel import Session

    from app.answers import answer_paste
    from app.bootstrap import prepare_to_read
    from app.matching.likely import read_saved_documents, save_documents
    from app.matching.paste_matcher import PasteMatcher
    from app.storage import active_entry_texts, active_signature_records, create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    prepare_to_read(settings, engine)
    # What the likely tier read of each entry is kept in the data dir: the next command
    # tokenizes only the entries that changed.
    saved_file = settings.data_dir / "cache" / "likely-entries.marshal"
    with Session(engine) as session:
        matcher = PasteMatcher.build(
            active_signature_records(session),
            active_entry_texts(session),
            saved=read_saved_documents(saved_file),
        )
    if matcher.likely.read_afresh:
        with contextlib.suppress(OSError):  # a read-only data dir only costs the time
            save_documents(matcher.likely, saved_file)
    try:
        text = text[-settings.max_paste_bytes :]
        return answer_paste(text, engine=engine, matcher=matcher).model_dump()
    finally:
        engine.dispose()


def _print_answer(answer: dict, err: bool = False) -> None:
    click.echo(answer["message"], err=err)
    for match in answer["matches"]:
        why = match["why"]
        tier = "" if match["tier"] == "signature" else "likely, "
        click.echo(
            f"\n  {match['title']}  [{match['id']}, {tier}{match['confidence']:.0%}]", err=err
        )
        if why:
            click.echo(f"  matched: {why['matched_text']}", err=err)
        else:
            click.echo(f"  likely because of: {', '.join(match['likely_words'])}", err=err)
        if match.get("version_note"):
            click.echo(f"  {match['version_note']}", err=err)
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
    pitfalls run -- python train.py; a Python file alone runs with this Python:
    python -m pitfalls run train.py
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

    if command[0].endswith(".py") and Path(command[0]).is_file():
        command = (sys.executable, *command)
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


@contextmanager
def _accounts() -> Iterator:
    """A session for account commands; an AccountError is a clear message and exit 1."""
    from sqlmodel import Session

    from app.accounts import AccountError

    with _database() as engine, Session(engine) as session:
        try:
            yield session
            session.commit()
        except AccountError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


@cli.group()
def user() -> None:
    """Accounts: reader (read), editor (edit entries), admin (also users and all tokens)."""


ROLE_CHOICE = click.Choice(["reader", "editor", "admin"])


@user.command("add")
@click.argument("name")
@click.option("--role", type=ROLE_CHOICE, default="editor", show_default=True)
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (scripts).")
def user_add(name: str, role: str, password_stdin: bool) -> None:
    """Create a user; the password is asked for (or read from stdin)."""
    from app.accounts import CLI, add_user

    password = _read_password(password_stdin)
    with _accounts() as session:
        add_user(session, name=name, role=role, password=password, actor=CLI)
    click.echo(f"added {name} ({role})")


@user.command("list")
def user_list() -> None:
    """List the users with their roles and last login."""
    from app.accounts import list_users

    with _accounts() as session:
        for row in list_users(session):
            last = f"{row.last_login_at:%Y-%m-%d %H:%M}" if row.last_login_at else "never"
            click.echo(f"{row.name:<24} {row.role:<8} last login {last}")


@user.command("role")
@click.argument("name")
@click.argument("role", type=ROLE_CHOICE)
def user_role(name: str, role: str) -> None:
    """Change a user's role."""
    from app.accounts import CLI, set_role

    with _accounts() as session:
        set_role(session, name=name, role=role, actor=CLI)
    click.echo(f"{name} is now {role}")


@user.command("password")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (scripts).")
def user_password(name: str, password_stdin: bool) -> None:
    """Set a user's password (this logs them out everywhere)."""
    from app.accounts import CLI, set_password

    password = _read_password(password_stdin)
    with _accounts() as session:
        set_password(session, name=name, password=password, actor=CLI)
    click.echo(f"password of {name} changed")


@cli.group()
def token() -> None:
    """API tokens for bots and CI: `Authorization: Bearer <token>`."""


@token.command("create")
@click.option("--name", required=True, help="What the token is for, e.g. ci-bot.")
@click.option("--scope", type=click.Choice(["read", "write"]), default="read", show_default=True)
@click.option("--expires", help="Lifetime such as 90d, 12h or 2w (default: never).")
def token_create(name: str, scope: str, expires: str | None) -> None:
    """Create a token and print it once; only its hash is kept."""
    from app.accounts import CLI, create_token, parse_duration

    with _accounts() as session:
        lifetime = parse_duration(expires) if expires else None
        row, secret = create_token(session, name=name, scope=scope, expires_in=lifetime, owner=CLI)
        expiry = f"{row.expires_at:%Y-%m-%d}" if row.expires_at else "never"
    click.echo(secret)
    click.echo(
        f"token {name!r} ({scope}, expires {expiry}): copy it now, it is not shown again", err=True
    )


@token.command("list")
def token_list() -> None:
    """List tokens: id, name, scope, owner, state, last use."""
    from app.accounts import list_tokens, token_state

    with _accounts() as session:
        for row in list_tokens(session):
            used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
            click.echo(
                f"{row.id:>4} {row.name:<20} {row.scope:<6} {row.owner or 'cli':<12} "
                f"{token_state(row):<8} {row.prefix}…  last used {used}"
            )


@token.command("revoke")
@click.argument("token_id", type=int)
def token_revoke(token_id: int) -> None:
    """Revoke a token by its id (see `pitfalls token list`)."""
    from app.accounts import CLI, revoke_token

    with _accounts() as session:
        name = revoke_token(session, token_id=token_id, actor=CLI).name
    click.echo(f"revoked token {token_id} ({name})")


@cli.command()
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server's API instead.")
@click.option(
    "--token",
    envvar="PITFALLS_TOKEN",
    help="API token for --server (or PITFALLS_TOKEN), where reading needs one.",
)
def mcp(server: str | None, token: str | None) -> None:
    """Serve the MCP tools over stdio, for a coding agent: match_traceback, search_pitfalls,
    get_pitfall, report_outcome, and the entries as pitfall:// resources."""
    from app.answer_sources import RemotePitfalls, local_pitfalls
    from app.mcp_server import build_server

    pitfalls = RemotePitfalls(server, token) if server else local_pitfalls(_settings())
    build_server(pitfalls).run("stdio")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--reload", is_flag=True, help="Restart when the code changes (development).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--forwarded-allow-ips",
    default=None,
    help="Proxy addresses whose X-Forwarded-Proto/-For are trusted, comma-separated, or * "
    "[default: PITFALLS_FORWARDED_ALLOW_IPS, else none].",
)
def serve(
    host: str, port: int, reload: bool, workers: int, forwarded_allow_ips: str | None
) -> None:
    """Prepare the data dir (schema, content, index) and serve the web app and API."""
    import uvicorn

    from app.bootstrap import prepare_data
    from app.logs import log_config
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    ingested = prepare_data(settings, engine).ingest
    engine.dispose()
    assert ingested is not None  # ingest="always"
    for problem in ingested.problems:
        click.echo(str(problem), err=True)
    click.echo(ingested.summary_line(), err=True)
    click.echo(f"serving on http://{host}:{port}{settings.root_path}/", err=True)
    uvicorn.run(
        "app.web:create_app",
        factory=True,
        host=host,
        port=port,
        reload=reload,
        workers=None if reload else workers,
        **proxy_options(settings, forwarded_allow_ips),
        log_config=log_config(settings),
        access_log=False,  # the app logs each request itself, with its request id
    )


def proxy_options(settings, forwarded_allow_ips: str | None = None) -> dict:
    """uvicorn's options for forwarded headers: read only from the proxies named (the option,
    else PITFALLS_FORWARDED_ALLOW_IPS), none by default: trusted from anyone, a client could
    name any address and dodge every per-address limit."""
    trusted = (forwarded_allow_ips or settings.forwarded_allow_ips).strip()
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or None}


def main() -> None:
    try:
        cli()
    except Exception as exc:
        # A start that failed for a reason the operator can fix is one sentence and exit 2.
        from app.bootstrap import startup_problem

        try:
            settings = load_settings()
        except SettingsError:
            raise exc from None
        problem = startup_problem(exc, settings)
        if problem is None:
            raise
        click.echo(f"pitfalls: cannot start: {problem}", err=True)
        sys.exit(2)
