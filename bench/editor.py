"""The editor's live check: what one keystroke costs, against `pitfalls check` on the same file.

    python bench/editor.py [--repeat 30]

Over a database holding the repository's entries (and again with 1k generated entries added), it
times `check_draft` as the editor runs it on every pause in typing (contract, links, collisions
judged against the process's cached matcher plus the draft's own signatures) and as a save runs it
(the other entries' signatures read and compiled afresh), `try_paste` (the signature tester), and
the baseline `check_paths([file])`: what `pitfalls check FILE` does, reading the sibling files
from disk. p50/p99 in ms.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlmodel import Session

from app import storage
from app.checker import check_paths
from app.ingest import ingest_content
from app.matching import SignatureMatcher
from app.settings import load_settings
from app.storage import create_db_engine, upgrade_schema
from app.wiki import check_draft, try_paste

REPO = Path(__file__).resolve().parent.parent
ENTRY = "view-non-contiguous"
PASTE = (
    'Traceback (most recent call last):\n  File "m.py", line 3, in <module>\n'
    "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.\n"
)


def timed(function, repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def generated_entry(i: int) -> str:
    return (
        f"---\nid: generated-{i}\ntitle: Generated pitfall {i}\nsummary: Generated for a benchmark.\n"
        "kind: error\nsignatures:\n  - exception: RuntimeError\n"
        f"    message: 'generated failure {i} in (?P<layer>\\w+) with (?P<n>\\d+) items'\n"
        f"    example: 'RuntimeError: generated failure {i} in conv with 3 items'\n---\n\n"
        "## What you see\n\nA failure.\n\n## Why it happens\n\nA reason.\n\n## Fix\n\nA fix.\n"
    )


def measure(content: Path, label: str, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as data:
        settings = load_settings(data_dir=Path(data), content_dir=content)
        engine = create_db_engine(settings)
        upgrade_schema(engine)
        ingest_content(engine, content)
        markdown = (content / f"{ENTRY}.md").read_text(encoding="utf-8")
        with Session(engine) as session:
            shared = SignatureMatcher(storage.active_signature_records(session))
            report = check_draft(session, markdown, editing=ENTRY)
            assert not report.errors, report.errors
            live_report = check_draft(session, markdown, editing=ENTRY, shared=shared)
            assert live_report.problems == report.problems
            live = timed(
                lambda: check_draft(session, markdown, editing=ENTRY, shared=shared), repeat
            )
            draft = timed(lambda: check_draft(session, markdown, editing=ENTRY), repeat)
            tester = timed(lambda: try_paste(session, report.doc, PASTE), repeat)
        engine.dispose()
    baseline = timed(lambda: check_paths([content / f"{ENTRY}.md"]), max(3, repeat // 5))
    files = len(list(content.glob("*.md")))
    print(
        f"| {label} ({files} entries) | {live[0]:.1f} / {live[1]:.1f} | "
        f"{draft[0]:.1f} / {draft[1]:.1f} | {tester[0]:.1f} / {tester[1]:.1f} | "
        f"{baseline[0]:.1f} / {baseline[1]:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(
        "| database | live check (shared matcher) | check on save (fresh) | signature tester "
        "| pitfalls check FILE |"
    )
    print("|---|---|---|---|---|")
    measure(REPO / "content", "repository", args.repeat)
    with tempfile.TemporaryDirectory() as folder:
        content = Path(folder) / "content"
        content.mkdir()
        for path in (REPO / "content").glob("*.md"):
            (content / path.name).write_bytes(path.read_bytes())
        for i in range(1000):
            (content / f"generated-{i}.md").write_text(generated_entry(i), encoding="utf-8")
        measure(content, "with 1k generated", args.repeat)


if __name__ == "__main__":
    main()
