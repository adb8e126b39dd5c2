"""`pitfalls search` and `match`: answers at a terminal, from here or from a server (`run` is
in app/cli/run.py)."""

import contextlib
import json
import sys

import click

from app.cli.group import CannotRun, _index_dir, _remote, _settings_to_read, cli


@cli.command()
@click.argument("query", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 200))
@click.option("--page", default=1, show_default=True, type=click.IntRange(1))
@click.option("--kind", help="Only entries of this kind.")
@click.option("--tag", help="Only entries with this tag.")
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server instead.")
def search(
    query: tuple[str, ...],
    as_json: bool,
    limit: int,
    page: int,
    kind: str | None,
    tag: str | None,
    server: str | None,
) -> None:
    """Search the knowledge base."""
    text = " ".join(query)
    if server:
        from app.answer_sources import SourceError

        try:
            result = _remote(server).search(text, kind, tag, limit, page=page)
        except SourceError as exc:
            raise CannotRun(str(exc)) from None
    else:
        result = _local_search(text, kind=kind, tag=tag, page=page, limit=limit)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    if result.get("corrected_from"):
        click.echo(f"showing results for: {result['query']} (typed: {result['corrected_from']})")
    if result.get("suggestion"):
        click.echo(f"did you mean: {result['suggestion']}")
    relaxed = " (some words only)" if result.get("relaxed") else ""
    click.echo(f"{result.get('total', 0)} result(s){relaxed}")
    for hit in result.get("hits", []):
        link = f"  {_link(hit['url'], server)}" if server and hit.get("url") else ""
        click.echo(f"  {hit['id']:<36} {hit['title']}{link}")
    if result.get("loose_total"):
        click.echo(f"{result['loose_total']} more loosely related (--json lists them)")
    note = result.get("filter_note")
    if note:
        click.echo(note["message"])
        for dropped in note.get("without", []):
            click.echo(f"  without {dropped['label']}: {dropped['total']} result(s)")


def _link(path: str, server: str | None) -> str:
    """A page's address as printed: absolute when it came from a server."""
    return f"{server.rstrip('/')}{path}" if server and path.startswith("/") else path


def _local_search(text: str, **options) -> dict:
    """`SearchResult.to_dict()` for `text`. When the index has applied every change the
    database holds (its mark read with sqlite3), the index is searched as it is, without
    SQLAlchemy; otherwise the database is prepared and the index brought up to it first."""
    from app.feed_mark import FeedMark
    from app.local_cache import read_mark, sqlite_file
    from app.search import SearchService
    from app.search.index import engine_name, read_state

    settings = _settings_to_read()
    database = sqlite_file(settings.database_url)
    mark = read_mark(database) if database is not None else None
    state = read_state(_index_dir(settings), engine_name(settings.search_engine))
    current = (
        mark is not None
        and state is not None
        and state.mark == FeedMark(int(mark[0] or 0), int(mark[1] or 0))
    )
    if current:
        service = SearchService(_index_dir(settings), search_engine=settings.search_engine)
        try:
            return service.search(text, **options).to_dict()
        finally:
            service.close()
    from app.bootstrap import prepare_data
    from app.settings import full_settings
    from app.storage import create_db_engine

    full = full_settings(settings)
    engine = create_db_engine(full)
    prepare_data(full, engine, ingest="if-empty")
    service = SearchService(_index_dir(full), engine, search_engine=full.search_engine)
    try:
        return service.search(text, **options).to_dict()
    finally:
        service.close()
        engine.dispose()


def _answer(text: str, server: str | None) -> dict:
    """The /api/v1/match answer for `text`: from a running server, or computed here."""
    if server:
        from app.answer_sources import SourceError

        try:
            return _remote(server).match(text)
        except SourceError as exc:
            raise CannotRun(str(exc)) from None
    settings = _settings_to_read()
    # A SQLite database: answered from the data dir's cache (built from the database when it
    # is missing or stale), without SQLAlchemy. PostgreSQL: read from the database each time.
    from app.local_cache import answer_from_cache, build_match_data, cached_data

    data = cached_data(settings, "match", build_match_data)
    if data is not None:
        return answer_from_cache(text[-settings.max_paste_bytes :], data)
    from sqlmodel import Session

    from app.answers import answer_paste
    from app.bootstrap import prepare_to_read
    from app.matching.likely import read_saved_documents, save_documents
    from app.matching.paste_matcher import PasteMatcher
    from app.settings import full_settings
    from app.storage import active_entry_texts, active_signature_records, create_db_engine

    full = full_settings(settings)
    engine = create_db_engine(full)
    prepare_to_read(full, engine)
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


def _print_answer(answer: dict, err: bool = False, server: str | None = None) -> None:
    """The answer for a terminal; its links absolute when it came from `server`."""
    from app.tracebacks.frames import folded_from_answer, folded_lines

    click.echo(answer["message"], err=err)
    for line in folded_lines(folded_from_answer(answer.get("parsed"))):
        click.echo(f"  {line}", err=err)
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
        click.echo(f"  more: {_link(match['url'], server)}", err=err)
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
        _print_answer(answer, server=server)
    sys.exit(0 if answer["matches"] else 1)
