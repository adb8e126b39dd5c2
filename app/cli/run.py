"""`pitfalls run -- CMD`: run a command with its output passed through, and when it fails,
explain the error it died of: in a multi-process job (torchrun, Accelerate, DeepSpeed,
mp.spawn), the rank that failed first; under GitHub Actions (`--github`), also as error
annotations and the job summary. The command's own exit code is always kept: a failure to
explain is one line on stderr, never a different exit code.
"""

import shlex
import sys
from pathlib import Path

import click

from app.cli.group import cli

TAIL_BYTES = 1_000_000  # of the command's output kept for the answer: its error is at the end


def _run_passing_output(command: tuple[str, ...]) -> tuple[int, str]:
    """Run `command` with its stdout and stderr passed through as they come; its exit code
    and the last TAIL_BYTES of both streams."""
    import subprocess
    import threading
    from collections import deque

    tail: deque[bytes] = deque()
    size = [0]
    lock = threading.Lock()

    def pump(stream, sink) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            sink.write(chunk)
            sink.flush()
            with lock:
                tail.append(chunk)
                size[0] += len(chunk)
                while size[0] > TAIL_BYTES and len(tail) > 1:
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
    return code, b"".join(tail).decode("utf-8", errors="replace")


def _exit_status(code: int) -> int:
    """A command killed by signal N exits as a shell reports it, 128 + N."""
    return 128 - code if code < 0 else code


def entry_link(match: dict, server: str | None) -> str:
    """Where to read a matched entry: its page on the server, or the command that shows it."""
    url = match["url"]
    if url.startswith(("http://", "https://")):
        return url
    if server:
        return server.rstrip("/") + url
    return f"pitfalls show {match['id']}"


def explain_failure(text: str, *, server: str | None, github: bool, command: str) -> None:
    """Print the answer for a failed command's output (stderr); with `github`, also the
    annotations (stdout) and the job summary."""
    from app.cli.answers import _answer, _print_answer
    from app.cli.github import error_line
    from app.tracebacks.ranks import first_failure

    failure = first_failure(text)
    click.echo("\n--- pitfalls ---", err=True)
    who = None
    if failure is None:
        answer = _answer(text, server)
    else:
        code = f", exit code {failure.exitcode}" if failure.exitcode else ""
        who = f"{failure.who} failed first ({failure.found_by}{code})"
        answer = _answer(failure.traceback, server)
        if answer["parsed"]["exceptions"]:
            click.echo(f"{who}; its error:\n  {error_line(answer)}\n", err=True)
        else:
            click.echo(f"{who}; its output shows no error: the whole output is read.\n", err=True)
            answer = _answer(text, server)
    _print_answer(answer, err=True, server=server)
    if github:
        _to_github(text, answer, failure, server=server, command=command, who=who)


def _to_github(
    text: str, answer: dict, failure, *, server: str | None, command: str, who: str | None
) -> None:
    from app.cli.answers import _answer
    from app.cli.github import (
        MAX_ANNOTATIONS,
        annotation,
        append_summary,
        distinct_known,
        summary_markdown,
    )
    from app.tracebacks.ranks import each_traceback

    answers = [answer]
    if failure is None:  # an output may hold several errors: each known one is annotated
        tracebacks = each_traceback(text)
        if len(tracebacks) > 1:
            answers = [_answer(traceback, server) for traceback in tracebacks]
    known = distinct_known(answers)
    links = [entry_link(known_answer["matches"][0], server) for known_answer in known]
    rank = failure.who if failure is not None else None
    for known_answer, link in list(zip(known, links, strict=True))[:MAX_ANNOTATIONS]:
        click.echo(annotation(known_answer, link, rank))
    if known:
        append_summary(summary_markdown(known, links, command, who))


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server instead.")
@click.option(
    "--github/--no-github",
    default=None,
    help="Also write GitHub Actions error annotations and the job summary "
    "(on by itself when GITHUB_ACTIONS=true).",
)
def run(command: tuple[str, ...], server: str | None, github: bool | None) -> None:
    """Run COMMAND with its output passed through; when it fails, show the matching pitfalls
    (for a multi-process job, those of the rank that failed first).

    Exits with the command's own exit code. Put `--` before the command:
    pitfalls run -- python train.py; a Python file alone runs with this Python:
    python -m pitfalls run train.py
    """
    from app.cli.github import in_github_actions

    if command[0].endswith(".py") and Path(command[0]).is_file():
        command = (sys.executable, *command)
    code, text = _run_passing_output(command)
    if code != 0:
        try:
            explain_failure(
                text,
                server=server,
                github=in_github_actions() if github is None else github,
                command=shlex.join(command),
            )
        except click.ClickException as exc:
            click.echo(f"pitfalls run: could not explain the failure: {exc.format_message()}",
                       err=True)  # fmt: skip
        except Exception as exc:  # the command's exit code matters more than the explanation
            click.echo(f"pitfalls run: could not explain the failure ({type(exc).__name__}: "
                       f"{exc})", err=True)  # fmt: skip
    sys.exit(_exit_status(code))
