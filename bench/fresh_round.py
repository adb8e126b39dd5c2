"""A fresh round of real pastes, measured as the product answers them: figures only, no misses.

    python bench/fresh_round.py ROUND_DIR [--content content] [--reader READER.json]

ROUND_DIR holds a manifest (`<round>.json`: `file`, `source`, `expected`, `holds`, ...) and the
pastes it names, gathered blind from threads no other manifest lists. The matcher is built from
`--content` with the shipped model, exactly what `/api/v1/match` runs. It prints top-1 on
positives and the share of negatives with no match, by what the paste holds (the gatherer's
`holds`: an error line, only frames, or prose), and the same for a blind reader's answers
(`--reader`: a list of `{"file", "answer"}`) on the same pastes. It never lists a case: a
round's misses, once looked at, make it tuning data.

Run it at the starting commit (from a worktree of that commit, with its own copy of this file)
and at the end, before anyone looks at the round's misses.
"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.checker import (  # noqa: E402
    collect_entry_files,
    entry_texts,
    load_entry_files,
    signature_records,
)
from app.matching.calibration import load_model  # noqa: E402
from app.matching.paste_matcher import PasteMatcher  # noqa: E402
from app.matching.signature_tier import SignatureMatcher  # noqa: E402
from app.tracebacks import parse_traceback  # noqa: E402

HOLDS = ("error", "frames", "prose")


def _right(answer: str | None, expected: str | list[str]) -> bool:
    """A topic mapped to several entries (`--map`) is right for any of them."""
    return answer in expected if isinstance(expected, list) else answer == expected


def _line(name: str, answers: dict[str, str | None], cases: list[dict]) -> str:
    cells = []
    for holds in (*HOLDS, None):
        group = [c for c in cases if holds is None or c.get("holds", "error") == holds]
        pos = [c for c in group if c["expected"]]
        neg = [c for c in group if not c["expected"]]
        right = sum(_right(answers.get(c["file"]), c["expected"]) for c in pos)
        clean = sum(answers.get(c["file"]) is None for c in neg)
        top1 = f"{right}/{len(pos)} {right / len(pos):5.1%}" if pos else "-"
        cleaned = f"{clean}/{len(neg)} {clean / len(neg):5.1%}" if neg else "-"
        cells.append(f"{top1:>14} {cleaned:>14}")
    return f"  {name:18}" + "".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("round", type=Path)
    parser.add_argument("--content", type=Path, default=ROOT / "content")
    parser.add_argument("--reader", type=Path, action="append", default=[])
    parser.add_argument(
        "--map",
        type=Path,
        help="JSON {label: entry id or [ids]} for rounds labelled by topic keys",
    )
    args = parser.parse_args()

    cases = [c for m in sorted(args.round.glob("*.json")) for c in json.loads(m.read_text())]
    if args.map:
        mapping = json.loads(args.map.read_text())
        cases = [{**c, "expected": mapping.get(c["expected"], c["expected"])} for c in cases]
    docs = load_entry_files(collect_entry_files([args.content]))
    matcher = PasteMatcher(
        SignatureMatcher(signature_records(docs)), entry_texts(docs), load_model()
    )
    answers: dict[str, str | None] = {}
    tiers: Counter[str] = Counter()
    for case in cases:
        text = (args.round / case["file"]).read_bytes().decode("utf-8", errors="replace")
        result = matcher.match(parse_traceback(text))
        first = result.matches[0] if result.matches else None
        answers[case["file"]] = first.entry_id if first else None
        tiers[first.tier if first else "none"] += 1

    print(
        f"{args.round.name}: {len(cases)} pastes, "
        f"{sum(1 for c in cases if c['expected'])} positives, "
        f"{sum(1 for c in cases if not c['expected'])} negatives; "
        f"{len(docs)} entries in {args.content}"
    )
    header = "".join(f"{h + ' top-1':>14} {h + ' clean':>14}" for h in (*HOLDS, "all"))
    print(f"  {'':18}{header}")
    print(_line("the matcher", answers, cases))
    for path in args.reader:
        read = {r["file"]: r.get("answer") for r in json.loads(path.read_text())}
        print(_line(path.stem[:18], read, [c for c in cases if c["file"] in read]))
    print(f"  answers by tier: {dict(tiers)}")


if __name__ == "__main__":
    main()
