"""The memory tier's cost: a whole paste answered with no memory, the shipped one, and a large one.

    python bench/memory.py [--size 100000] [--runs 200]

The matcher is the shipped entries' with the shipped model. The pastes are real ones from
tests/data/real-pastes/ that no signature claims (so the likely and memory tiers do their work),
each padded with log lines in front to about 50 KB, as a pasted job log is. The large memory
is the shipped one repeated with every remembered paste's words shifted (each copy's rare words
get a suffix of its own, so the copies are distinct documents with distinct words, as a team's
own pastes would be). Prints p50 and p99 of `PasteMatcher.match` per memory and the memory's
size in RSS (the process's growth when it is built).
"""

import argparse
import gc
import os
import random
import statistics
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
from app.matching.evaluation import load_corpus  # noqa: E402
from app.matching.memory import PasteMemory, Remembered, read_memory  # noqa: E402
from app.matching.paste_matcher import PasteMatcher  # noqa: E402
from app.matching.signature_tier import SignatureMatcher  # noqa: E402
from app.tracebacks import parse_traceback  # noqa: E402

PAD_LINE = "epoch 3 step 1200 loss 0.4312 lr 0.0003 grad_norm 1.27 tokens/s 10432\n"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def grown(items: list[Remembered], size: int) -> list[Remembered]:
    out = list(items)
    copy = 0
    while len(out) < size:
        copy += 1
        for item in items:
            words = [
                f"{w}{copy}" if len(w) > 6 and w.isalpha() else w for w in item.message.split()
            ]
            out.append(
                Remembered(
                    f"{item.thread}{copy}",
                    item.label,
                    " ".join(words),
                    item.exception_type,
                    item.frames,
                )
            )
            if len(out) >= size:
                break
    return out


def timed(matcher: PasteMatcher, pastes: list, runs: int) -> tuple[float, float]:
    times = []
    for i in range(runs):
        parsed = pastes[i % len(pastes)]
        started = time.perf_counter()
        matcher.match(parsed)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    docs = load_entry_files(collect_entry_files([ROOT / "content"]))
    records, texts = signature_records(docs), entry_texts(docs)
    signatures = SignatureMatcher(records)
    bare = PasteMatcher(signatures, texts, memory=None)
    random.seed(7)
    cases = [c for c in load_corpus(ROOT / "tests" / "data" / "real-pastes")]
    unclaimed = []
    for case in random.sample(cases, len(cases)):
        padded = PAD_LINE * (50_000 // len(PAD_LINE)) + case.text
        parsed = parse_traceback(padded)
        if not bare.match(parsed, likely=False).matches and parsed.final is not None:
            unclaimed.append(parsed)
        if len(unclaimed) >= 50:
            break
    print(
        f"{len(texts)} entries, {len(unclaimed)} unclaimed pastes of about 50 KB, "
        f"{args.runs} answers each, load {os.getloadavg()[0]:.1f}"
    )
    shipped_items = read_memory()
    gc.collect()
    before = rss_mb()
    shipped = PasteMemory(shipped_items)
    shipped_mb = rss_mb() - before
    large_items = grown(shipped_items, args.size)
    gc.collect()
    before = rss_mb()
    large = PasteMemory(large_items)
    large_mb = rss_mb() - before
    print(f"{'memory':>22} {'pastes':>8} {'p50 ms':>8} {'p99 ms':>8} {'RSS MB':>8}")
    for name, memory, mb in (
        ("none (signatures+text)", None, 0.0),
        ("shipped", shipped, shipped_mb),
        ("large", large, large_mb),
    ):
        matcher = PasteMatcher(signatures, texts, memory=memory)
        timed(matcher, unclaimed, 20)  # warm
        p50, p99 = timed(matcher, unclaimed, args.runs)
        count = len(memory) if memory is not None else 0
        print(f"{name:>22} {count:>8} {p50:>8.2f} {p99:>8.2f} {mb:>8.0f}")


if __name__ == "__main__":
    main()
