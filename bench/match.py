"""Matching benchmark: our one-pass RE2 sets vs a plain Python `re` loop over the same patterns.

    python bench/match.py [--repeat 30]

For 1k and 10k generated signatures and 5 KB / 50 KB tracebacks it prints the set build time,
p50/p99 of the whole answer (parse + match + rank) and of the matching step alone, and the same
matching done by a `re` loop, side by side, as ratios. Then both tiers (signatures, then likely
matches by the entries' words) beside the signature tier alone, for a paste a signature knows and
for one it does not (which goes on to the likely tier).
"""

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.matching import SignatureMatcher, SignatureRecord, match_paste
from app.matching.calibration import load_model
from app.matching.likely import EntryText
from app.matching.paste_matcher import PasteMatcher
from app.tracebacks import parse_traceback

WORDS = [
    "tensor",
    "gradient",
    "layer",
    "batch",
    "module",
    "weight",
    "device",
    "shape",
    "stride",
    "memory",
    "worker",
    "rank",
]
TEMPLATES = [
    r"{a} {b} is not compatible with (?P<what>\w+) number {i}\b",
    r"Expected (?P<n>\d+) {a} but got {b} for signature {i}\.",
    r"could not run '(?P<op>[\w:]+)' with {a} {b} \#{i}",
    r"{a}_{b}_{i} \((?P<shape>\[[^\]]*\])\) does not match",
]


def signatures(count: int, seed: int = 5) -> list[SignatureRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        pattern = rng.choice(TEMPLATES).format(a=rng.choice(WORDS), b=rng.choice(WORDS), i=i)
        out.append(
            SignatureRecord(
                f"entry-{i}", 0, pattern, pattern, rng.choice(["RuntimeError", "ValueError", None])
            )
        )
    return out


def traceback_text(size: int, message: str, seed: int = 9) -> str:
    rng = random.Random(seed)
    frames = []
    while sum(map(len, frames)) < size - len(message) - 100:
        module = "/".join(rng.choice(WORDS) for _ in range(4))
        frames.append(
            f'  File "/usr/lib/python3.11/site-packages/{module}.py", line {rng.randint(1, 2000)}, in {rng.choice(WORDS)}\n    return self.{rng.choice(WORDS)}({rng.choice(WORDS)})\n'
        )
    return "Traceback (most recent call last):\n" + "".join(frames) + f"RuntimeError: {message}\n"


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[
        min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))
    ] * 1000


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def re_loop(compiled: list[re.Pattern], texts: list[str]) -> list[int]:
    return [i for i, pattern in enumerate(compiled) for text in texts if pattern.search(text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"{'':44}{'ours p50/p99 (ms)':>22}{'re loop p50/p99 (ms)':>24}{'re / ours':>11}")
    for count in (1_000, 10_000):
        records = signatures(count)
        # Plant the signature the traceback's error should find, in the middle of the set.
        target = count // 2
        records[target] = SignatureRecord(
            f"entry-{target}",
            0,
            rf"shape is not compatible with (?P<what>\w+) number {target}\b",
            "",
            "RuntimeError",
        )
        message = f"tensor shape is not compatible with stride number {target}"
        start = time.perf_counter()
        matcher = SignatureMatcher(records)
        build = time.perf_counter() - start
        compiled = [re.compile(r.message) for r in records]
        print(f"\n== {count} signatures: set build {build:.2f} s ==")
        for size in (5_000, 50_000):
            text = traceback_text(size, message)
            parsed = parse_traceback(text)
            searched = [e.message for e in parsed.exceptions] + [parsed.text]
            whole = timed(lambda m=matcher, t=text: match_paste(m, parse_traceback(t)), args.repeat)
            step = timed(lambda m=matcher, p=parsed: match_paste(m, p), args.repeat)
            parse = timed(lambda t=text: parse_traceback(t), args.repeat)
            loop_reps = max(3, args.repeat // (10 if count > 1000 else 3))
            loop = timed(lambda c=compiled, s=searched: re_loop(c, s), loop_reps)
            found = [m.entry_id for m in match_paste(matcher, parsed)][:1]
            print(
                f"{f'{size // 1000} KB: whole answer (parse+match+rank)':44}{whole[0]:>10.2f} / {whole[1]:<9.2f}"
            )
            print(f"{f'{size // 1000} KB: parse only':44}{parse[0]:>10.2f} / {parse[1]:<9.2f}")
            print(
                f"{f'{size // 1000} KB: matching step alone':44}{step[0]:>10.2f} / {step[1]:<9.2f}{loop[0]:>12.2f} / {loop[1]:<9.2f}{loop[0] / step[0]:>10.0f}x   top: {found}"
            )
        both_tiers(records, message, count, args.repeat)


def both_tiers(records: list[SignatureRecord], message: str, count: int, repeat: int) -> None:
    """Whole answers with both tiers beside the signature tier alone."""
    rng = random.Random(11)
    entries = [
        EntryText(
            r.entry_id,
            f"{rng.choice(WORDS)} {rng.choice(WORDS)} pitfall {i}",
            summary=" ".join(rng.choice(WORDS) for _ in range(12)),
            examples=(r.example or r.message,),
            exception_types=frozenset({r.exception} if r.exception else ()),
        )
        for i, r in enumerate(records)
    ]
    start = time.perf_counter()
    paste_matcher = PasteMatcher(SignatureMatcher(records), entries, load_model())
    build = time.perf_counter() - start
    print(
        f"-- both tiers ({count} entries): build {build:.2f} s; p50/p99 ms, both vs signatures --"
    )
    unknown = "the gradient worker layer stride was not found in the module memory"
    for size in (5_000, 50_000):
        for label, text in (("known", traceback_text(size, message)),
                            ("unknown", traceback_text(size, unknown))):  # fmt: skip
            both = timed(lambda t=text: paste_matcher.match(parse_traceback(t)), repeat)
            alone = timed(
                lambda t=text: paste_matcher.match(parse_traceback(t), likely=False), repeat
            )
            result = paste_matcher.match(parse_traceback(text))
            tier = result.matches[0].tier if result.matches else "none"
            print(
                f"{f'{size // 1000} KB {label}: whole answer':44}{both[0]:>10.2f} / {both[1]:<9.2f}"
                f"{alone[0]:>12.2f} / {alone[1]:<9.2f}   answered by: {tier}"
            )


if __name__ == "__main__":
    main()
