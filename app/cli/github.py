"""Answers in the form GitHub Actions reads: error annotations and the job summary.

From GitHub's "Workflow commands for GitHub Actions" (its sections "Setting an error message"
and "Adding a job summary"): an annotation is the line
`::error file={name},line={line},title={title}::{message}` on the step's output, with `%`, CR
and LF percent-encoded in the message and, in a property, also `:` and `,`; the job summary is
Markdown appended to the file that GITHUB_STEP_SUMMARY names (1 MiB a step at most). GitHub
shows at most 10 error annotations a step (50 a job) and drops the rest without a word, so at
most 10 are written and the summary holds every answer.
"""

import html
import os
import re
from pathlib import Path

MAX_ANNOTATIONS = 10
MAX_SUMMARY_BYTES = 900_000  # of this command's part of the summary, under GitHub's 1 MiB
MAX_MESSAGE_CHARS = 2_000


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _workspace_path(file: str) -> str:
    """A frame's file as GitHub names files: relative to the checkout when it is inside it."""
    path = Path(file)
    for base in (os.environ.get("GITHUB_WORKSPACE"), os.getcwd()):
        if base and path.is_absolute():
            try:
                return path.relative_to(base).as_posix()
            except ValueError:
                continue
    return path.as_posix()


def error_line(answer: dict) -> str:
    """The explained exception's first line, from the answer's reading of the paste."""
    parsed = answer.get("parsed") or {}
    final = parsed.get("final")
    exceptions = parsed.get("exceptions") or []
    if final is None or final >= len(exceptions):
        return ""
    exc = exceptions[final]
    first = (exc.get("message") or "").split("\n", 1)[0]
    return f"{exc['qualified_type']}: {first}" if first else exc["qualified_type"]


def distinct_known(answers: list[dict]) -> list[dict]:
    """The answers with a match, one for each entry they name first, in the order seen."""
    seen: set[str] = set()
    kept = []
    for answer in answers:
        matches = answer.get("matches") or []
        if matches and matches[0]["id"] not in seen:
            seen.add(matches[0]["id"])
            kept.append(answer)
    return kept


def annotation(answer: dict, link: str, who: str | None = None) -> str:
    """One `::error` workflow command for an answer with a match."""
    match = answer["matches"][0]
    properties = []
    frame = (answer.get("parsed") or {}).get("user_frame")
    if frame and frame.get("file"):
        properties.append(f"file={escape_property(_workspace_path(frame['file']))}")
        if frame.get("line"):
            properties.append(f"line={int(frame['line'])}")
    properties.append(f"title={escape_property('Pitfalls: ' + match['title'])}")
    error = error_line(answer)
    lines = [f"{who}: {error}" if who else error, match.get("summary", ""), f"Fix: {link}"]
    message = "\n".join(line for line in lines if line)[:MAX_MESSAGE_CHARS]
    return f"::error {','.join(properties)}::{escape_data(message)}"


def _inline_code(text: str) -> str:
    """Untrusted text as a code span none of its backticks can close, on one line."""
    text = " ".join(text.split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


def _code(text: str) -> str:
    """Untrusted text as a fenced block no line of it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def summary_markdown(
    answers: list[dict], links: list[str], command: str, who: str | None = None
) -> str:
    """The full answers as Markdown for the job summary; untrusted text (the error, the
    command) is escaped, the entries' own Markdown (the fix) is kept as written."""
    known = len(answers)
    heading = f"## Pitfalls: {known} known error{'s' if known != 1 else ''}"
    parts = [heading, "", f"After {_inline_code(command)}" + (f": {who}." if who else ".")]
    if known > MAX_ANNOTATIONS:
        parts.append(
            f"\nGitHub shows {MAX_ANNOTATIONS} annotations a step: the other "
            f"{known - MAX_ANNOTATIONS} are only here."
        )
    for answer, link in zip(answers, links, strict=True):
        match = answer["matches"][0]
        title = html.escape(match["title"], quote=False)
        parts += ["", f"### {title} (`{match['id']}`)", ""]
        frame = (answer.get("parsed") or {}).get("user_frame")
        if frame and frame.get("file"):
            line = f":{frame['line']}" if frame.get("line") else ""
            parts.append(f"At {_inline_code(_workspace_path(frame['file']) + line)}:")
        summary = html.escape(match.get("summary", ""), quote=False)
        parts += [_code(error_line(answer)), "", summary, ""]
        if match.get("fix_markdown"):
            parts += ["**Fix**", "", match["fix_markdown"].strip(), ""]
        parts.append(
            f"More: {_inline_code(link)}" if link.startswith("pitfalls ") else f"More: <{link}>"
        )
    text = "\n".join(parts) + "\n"
    encoded = text.encode("utf-8")
    if len(encoded) > MAX_SUMMARY_BYTES:
        cut = encoded[:MAX_SUMMARY_BYTES].decode("utf-8", "ignore")
        text = cut + "\n\n(cut here: GitHub keeps 1 MiB of summary a step)\n"
    return text


def append_summary(markdown: str) -> bool:
    """Append to the job summary; False when there is none (not in GitHub Actions)."""
    name = os.environ.get("GITHUB_STEP_SUMMARY")
    if not name:
        return False
    with open(name, "a", encoding="utf-8") as summary:
        summary.write(markdown)
    return True
