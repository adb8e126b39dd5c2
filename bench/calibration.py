"""Accuracy and calibration of matching on real pastes: fit on one half, report on the other.

    python bench/calibration.py [--corpus tests/data/real-pastes] [--fresh c] [--write]

Each real paste falls in half A or B by a hash of its source. The likely tier's model (weights
and threshold) is fitted on A and reported on B, then fitted on B and reported on A; the
signature tier alone is reported beside it. Prints top-1 on positives, the share of negatives
with no match, the wrong answers of each held-out half, and a reliability table (confidence
bucket → share of top likely candidates that were the right entry) from held-out predictions.
`--fresh PREFIX` also reports on the batches whose name starts with PREFIX (gathered after the
signatures and the parser were tuned on the others), with the model fitted on the others only:
the figure for pastes nobody here has looked at. `--write` fits on every paste and writes the
shipped model (app/matching/likely_model.json).
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.checker import (  # noqa: E402
    collect_entry_files,
    entry_texts,
    load_entry_files,
    signature_records,
)
from app.matching.calibration import MODEL_FILE, Model, reliability  # noqa: E402
from app.matching.evaluation import (  # noqa: E402
    NEGATIVE_COST,
    fit_model,
    load_corpus,
    memory_alone,
    memory_of,
    report,
    run,
    with_model,
)
from app.matching.likely import FEATURES  # noqa: E402
from app.matching.memory import (  # noqa: E402
    MEMORY_FEATURES,
    MEMORY_FILE,
    PasteMemory,
    write_memory,
)
from app.matching.paste_matcher import PasteMatcher  # noqa: E402
from app.matching.signature_tier import SignatureMatcher  # noqa: E402
from app.tracebacks import parse_traceback  # noqa: E402

SECOND_READER = ROOT / "tests" / "data" / "real-pastes-second-reader.json"
# An expert's answers from the paste alone (no thread), for a random 200: the most that reading
# the paste can tell, since a label comes from the cause its thread found.
PASTE_READER = ROOT / "tests" / "data" / "real-pastes-paste-only-reader.json"


def second_reader(cases) -> None:
    """How often a second reader, labelling a random 150 of the pastes blind (paste and thread,
    no label, no matcher), chose the same entry or the same "none": how far the labels
    themselves can be trusted, and so how high a goal they can carry."""
    if not SECOND_READER.exists():
        return
    labels = {c.file: c.expected for c in cases}
    # A paste relabelled with an entry written after the reading is left out: the reader could
    # not have chosen it.
    rows = [
        r
        for r in json.loads(SECOND_READER.read_text(encoding="utf-8"))
        if r["file"] in labels and "entry_written_after" not in r
    ]
    if not rows:
        return
    agree = [r for r in rows if labels[r["file"]] in {r["expected"], *r["also"]}]
    print(
        f"second reader (blind, {len(rows)} pastes): same label for {len(agree)} = "
        f"{len(agree) / len(rows):.1%}"
    )


def paste_kind(text: str) -> str:
    """What a paste holds: an error (an exception line or a warning), only frames (cut before
    its error), or no error at all (a question in prose, a log with no error line)."""
    parsed = parse_traceback(text)
    if parsed.final is not None or parsed.warnings:
        return "an error"
    return "frames only" if parsed.trailing_frames else "no error text"


def by_kind(outcomes) -> None:
    """Both held-out halves together, by what the pastes hold."""
    print("\nboth held-out halves, by what the paste holds:")
    print(f"  {'':15} {'positives':>10} {'top-1':>7} {'negatives':>10} {'clean':>7}")
    for kind in ("an error", "frames only", "no error text"):
        group = [o for o in outcomes if paste_kind(o.case.text) == kind]
        pos = [o for o in group if o.case.expected]
        neg = [o for o in group if not o.case.expected]
        top1 = sum(o.right for o in pos) / len(pos) if pos else 0.0
        clean = sum(o.answer is None for o in neg) / len(neg) if neg else 0.0
        print(f"  {kind:15} {len(pos):10d} {top1:7.1%} {len(neg):10d} {clean:7.1%}")


def paste_reader(outcomes) -> None:
    """The expert reading the paste alone against the matcher (held out) on the same pastes."""
    if not PASTE_READER.exists():
        return
    answers = {
        r["file"]: r["answer"]
        for r in json.loads(PASTE_READER.read_text("utf-8"))
        if "entry_written_after" not in r  # relabelled with an entry the reader never saw
    }
    group = [o for o in outcomes if o.case.file in answers]
    if not group:
        return
    pos = [o for o in group if o.case.expected]
    neg = [o for o in group if not o.case.expected]
    print(f"\nan expert reading the paste alone (blind, {len(group)} pastes), against the matcher:")
    print(f"  {'':22} {'top-1':>7} {'clean':>7}")
    reader_top1 = sum(answers[o.case.file] == o.case.expected for o in pos) / len(pos)
    reader_clean = sum(answers[o.case.file] is None for o in neg) / len(neg)
    print(f"  {'the expert':22} {reader_top1:7.1%} {reader_clean:7.1%}")
    top1 = sum(o.right for o in pos) / len(pos)
    clean = sum(o.answer is None for o in neg) / len(neg)
    print(f"  {'the matcher, held out':22} {top1:7.1%} {clean:7.1%}")


def build(content: Path, memory: PasteMemory | None) -> PasteMatcher:
    docs = load_entry_files(collect_entry_files([content]))
    # Claims nothing; with a memory, it names the memory's features, so that the memory is
    # consulted and its features are there to fit.
    neutral = Model(
        weights=(0.0,) * len(features_for(memory)),
        bias=0.0,
        threshold=1.01,
        features=features_for(memory),
    )
    return PasteMatcher(
        SignatureMatcher(signature_records(docs)), entry_texts(docs), neutral, memory=memory
    )


def features_for(memory: PasteMemory | None) -> tuple[str, ...]:
    return (
        FEATURES if memory is not None else tuple(f for f in FEATURES if f not in MEMORY_FEATURES)
    )


def show(name: str, rep, *, wrong: bool = True) -> None:
    print(
        f"{name}: top-1 {rep.positives_right}/{rep.positives} = {rep.top1:.1%}; "
        f"negatives with no match {rep.negatives_clear}/{rep.negatives} = "
        f"{rep.negatives_clear_share:.1%}; answers by tier {rep.by_tier}"
    )
    if wrong:
        for file, expected, answer, tier in rep.wrong:
            print(f"    {file}: expected {expected}, got {answer} ({tier})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "real-pastes")
    parser.add_argument("--content", type=Path, default=ROOT / "content")
    parser.add_argument("--write", action="store_true", help="write the model fitted on all")
    parser.add_argument("--quiet", action="store_true", help="do not list wrong answers")
    parser.add_argument("--fresh", metavar="PREFIX", help="batches held out from all tuning")
    parser.add_argument(
        "--misses",
        metavar="PREFIX",
        help="list the wrong answers of these batches (only batches that are tuned on)",
    )
    parser.add_argument(
        "--negative-cost",
        type=float,
        default=NEGATIVE_COST,
        help="what a claimed negative costs against a right positive, choosing the threshold",
    )
    parser.add_argument(
        "--no-memory",
        action="store_true",
        help="without the memory tier: the model is fitted without its features (the shipped "
        "one is, for now: see docs/accuracy.md)",
    )
    args = parser.parse_args()

    started = time.perf_counter()
    cases = load_corpus(args.corpus)
    remembered = memory_of(cases)
    memory = None if args.no_memory else PasteMemory(remembered)
    matcher = build(args.content, memory)
    halves = {h: [c for c in cases if c.half == h] for h in "AB"}
    print(
        f"{len(cases)} real pastes ({sum(1 for c in cases if c.expected)} positives, "
        f"{sum(1 for c in cases if not c.expected)} negatives); "
        f"half A {len(halves['A'])}, half B {len(halves['B'])}"
    )
    second_reader(cases)
    signature_only = report(run(matcher, cases))
    show("signature tier alone, all pastes", signature_only, wrong=False)
    if memory is not None:
        pos, right, neg, clear = memory_alone(memory, cases)
        print(
            f"memory tier alone (the closest other thread's label), all pastes: top-1 "
            f"{right}/{pos} = {right / pos:.1%}; negatives with no match {clear}/{neg} = "
            f"{clear / neg:.1%}"
        )
    else:
        print("memory tier: off")

    held_out_scored = []
    held_out = []
    for fit_half, test_half in (("A", "B"), ("B", "A")):
        model = fit_model(
            run(matcher, halves[fit_half]),
            fitted_on=f"half {fit_half}",
            negative_cost=args.negative_cost,
            features=features_for(memory),
        )
        outcomes = run(with_model(matcher, model), halves[test_half])
        rep = report(outcomes)
        held_out_scored += [o.top_likely for o in outcomes if o.top_likely is not None]
        held_out += outcomes
        print(f"\nfitted on {fit_half} (threshold {model.threshold:.3f}), reported on {test_half}:")
        show(f"  both tiers, half {test_half}", rep, wrong=not args.quiet)

    by_kind(held_out)
    paste_reader(held_out)

    if args.fresh:
        fresh = [c for c in cases if c.file.startswith(args.fresh)]
        seen = [c for c in cases if not c.file.startswith(args.fresh)]
        model = fit_model(
            run(matcher, seen), fitted_on="seen batches", features=features_for(memory)
        )
        outcomes = run(with_model(matcher, model), fresh)
        print(
            f"\nfresh batches {args.fresh}* ({len(fresh)} pastes), model fitted on the other "
            f"{len(seen)} (threshold {model.threshold:.3f}):"
        )
        show("  signature tier alone", report(run(matcher, fresh)), wrong=False)
        show("  both tiers", report(outcomes), wrong=False)

    if args.misses:
        tuned = [c for c in cases if c.file.startswith(args.misses)]
        others = [c for c in cases if not c.file.startswith(args.misses)]
        model = fit_model(
            run(matcher, others), fitted_on="the other batches", features=features_for(memory)
        )
        print(f"\nbatches {args.misses}* ({len(tuned)} pastes), model fitted on the others:")
        show("  both tiers", report(run(with_model(matcher, model), tuned)))

    print("\nreliability of the likely tier on held-out pastes (top candidate of each):")
    print("  confidence  pastes  mean confidence  share right")
    for bucket, count, mean, share in reliability(held_out_scored):
        mean_text = f"{mean:.2f}" if mean is not None else "  - "
        share_text = f"{share:.0%}" if share is not None else " - "
        print(f"  {bucket:>9}  {count:6d}  {mean_text:>15}  {share_text:>11}")

    if args.write:
        model = fit_model(
            run(matcher, cases),
            fitted_on=f"{len(cases)} real pastes, both halves",
            negative_cost=args.negative_cost,
            features=features_for(memory),
        )
        MODEL_FILE.write_text(model.to_json() + "\n", encoding="utf-8")
        print(f"\nwrote {MODEL_FILE.relative_to(ROOT)} (threshold {model.threshold:.3f})")
        write_memory(remembered)  # shipped either way: a model fitted with it then uses it
        size = MEMORY_FILE.stat().st_size
        print(
            f"wrote {MODEL_FILE.relative_to(ROOT).with_name(MEMORY_FILE.name)} "
            f"({len(remembered)} pastes, {size / 1e3:.0f} kB)"
        )
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
