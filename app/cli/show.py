"""`pitfalls show ID`: one entry for a terminal, from this machine's database or a server's API.

The entry as its author wrote it: title, summary, kind, tags and the versions it covers, then
every section of the body with every code block kept. Code blocks are highlighted (Pygments)
only when standard output is a terminal and NO_COLOR is not set; in a pipe or a file the text is
plain, with no escape codes. `--json` prints what `GET /api/v1/entries/ID` answers.

An id with no entry (or an archived one) is one sentence and exit 1, as `pitfalls match` exits 1
when nothing matched: the command ran and found nothing. Exit 2 stays for a command that could
not run (a bad setting, a server that cannot be reached), so a script can tell the two apart.
"""

import json
import os
import sys
import textwrap

import click

from app.cli.group import CannotRun, _remote, _settings, _settings_to_read, cli


def _archived(entry_id: str) -> click.ClickException:
    return click.ClickException(
        f"entry {entry_id!r} is archived; restoring one of its revisions in the wiki brings it back"
    )


def _local_entry(entry_id: str) -> dict | None:
    """The entry's details from this machine's database (prepared as `match` prepares it):
    for SQLite, from the data dir's cache of every entry (app.local_cache)."""
    from app.local_cache import build_show_data, cached_data

    data = cached_data(_settings_to_read(), "show", build_show_data)
    if data is not None:
        entry = data["entries"].get(entry_id)
        if entry is not None and entry.get("archived"):
            raise _archived(entry_id)
        return entry
    from sqlmodel import Session

    from app.bootstrap import prepare_to_read
    from app.entry_details import get_entry_details
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    try:
        prepare_to_read(settings, engine)
        with Session(engine) as session:
            details = get_entry_details(session, entry_id)
        if details is None:
            return None
        if details.archived:
            raise _archived(entry_id)
        return details.model_dump(mode="json")
    finally:
        engine.dispose()


def _remote_entry(entry_id: str, server: str) -> dict | None:
    from app.answer_sources import SourceError

    try:
        return _remote(server).entry(entry_id)
    except SourceError as exc:
        raise CannotRun(str(exc)) from None


def body_of(markdown: str) -> str:
    """The Markdown after the front-matter (all of it when there is none)."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    if lines and lines[0].rstrip() == "---":
        for number, line in enumerate(lines[1:], start=1):
            if line.rstrip() in ("---", "..."):
                return "\n".join(lines[number + 1 :]).strip("\n")
    return markdown.strip("\n")


def _fence_opening(line: str) -> tuple[str, str] | None:
    """(the fence, its info string) when `line` opens a fenced code block (CommonMark)."""
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3 or stripped[:3] not in ("```", "~~~"):
        return None
    char = stripped[0]
    fence = stripped[: len(stripped) - len(stripped.lstrip(char))]
    info = stripped[len(fence) :].strip()
    if char == "`" and "`" in info:
        return None
    return fence, info


def _closes(line: str, fence: str) -> bool:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return False
    run = stripped[: len(stripped) - len(stripped.lstrip(fence[0]))]
    return len(run) >= len(fence) and not stripped[len(run) :].strip()


def _highlighted(code: str, info: str) -> str:
    from pygments import highlight
    from pygments.formatters import TerminalFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    language = info.split()[0] if info else ""
    try:
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return code
    return highlight(code, lexer, TerminalFormatter()).rstrip("\n")


def render_body(body: str, color: bool) -> list[str]:
    """The body's lines; with `color`, headings bold and code blocks highlighted."""
    out: list[str] = []
    lines = body.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _fence_opening(line)
        if opening is None:
            heading = line.startswith("#")
            out.append(click.style(line, bold=True) if color and heading else line)
            index += 1
            continue
        fence, info = opening
        end = index + 1
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        code = "\n".join(lines[index + 1 : end])
        out.append(click.style(line, dim=True) if color else line)
        if code or end > index + 1:
            out.extend((_highlighted(code, info) if color else code).split("\n"))
        if end < len(lines):
            out.append(click.style(lines[end], dim=True) if color else lines[end])
        index = end + 1
    return out


def entry_lines(entry: dict, color: bool, server: str | None = None) -> list[str]:
    """The whole entry for a terminal."""
    title = str(entry.get("title", ""))
    facts = [str(entry.get("id", "")), str(entry.get("kind", ""))]
    if entry.get("tags"):
        facts.append("tags: " + ", ".join(map(str, entry["tags"])))
    if entry.get("versions"):
        facts.append(f"torch {entry['versions']}")
    status = (entry.get("verification") or {}).get("status")
    if status:
        facts.append(str(status))
    lines = [click.style(title, bold=True) if color else title, " · ".join(facts), ""]
    if entry.get("summary"):  # one long line in the front-matter; the body is wrapped at 100
        lines += [*textwrap.wrap(str(entry["summary"]), 100), ""]
    lines += render_body(body_of(str(entry.get("markdown", ""))), color)
    related = [r.get("id") for r in entry.get("related") or [] if isinstance(r, dict)]
    if related:
        lines += ["", "Related: " + ", ".join(map(str, related))]
    if server and entry.get("url"):
        lines.append(f"On the site: {server.rstrip('/')}{entry['url']}")
    return lines


def _wants_color() -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


@cli.command()
@click.argument("entry_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON for the entry.")
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server instead.")
def show(entry_id: str, as_json: bool, server: str | None) -> None:
    """Print the entry ID: its summary, sections and code; exit 1 when there is no such entry."""
    entry = _remote_entry(entry_id, server) if server else _local_entry(entry_id)
    if entry is None:
        where = f" on {server}" if server else ""
        raise click.ClickException(
            f"there is no entry {entry_id!r}{where}; `pitfalls search WORDS` finds entries"
        )
    if as_json:
        click.echo(json.dumps(entry, ensure_ascii=False, indent=2))
        return
    click.echo("\n".join(entry_lines(entry, _wants_color(), server)))
