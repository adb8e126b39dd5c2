"""`pitfalls search` and `match`: answers at a terminal, from here or from a server (`run` is
in app/cli/run.py)."""

import contextlib
import json
import sys

import click

from app.cli.group import CannotRun, _index_dir, _settings, cli


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
    if result.loose_total:
        click.echo(f"{result.loose_total} more loosely related (--json lists them)")
    if result.filter_note:
        click.echo(result.filter_note.message)
        for dropped in result.filter_note.without:
            click.echo(f"  without {dropped.label}: {dropped.total} result(s)")


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
