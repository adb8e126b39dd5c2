"""Redaction benchmark: what it costs the matcher, and what it costs in time.

    python bench/redaction.py

Prints: how many of the real pastes (tests/data/real-pastes/) get the same signature-tier answer
from their redacted text as from the raw one; how many entry examples are still found by their
own entry after redaction; the CPU time of a typical paste, of hostile text of 0.5 and 1 MB (the
cap lifted: the ratio near 2 is what linear time looks like), and of the library layer alone on
its worst window shape.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
from app.matching.calibration import load_model
from app.matching.evaluation import load_corpus
from app.matching.paste_matcher import PasteMatcher
from app.matching.signature_tier import SignatureMatcher
from app.redaction import load_rules, redact
from app.redaction.library import library_findings
from app.tracebacks import parse_traceback
from tests.hostile_inputs import hostile_text

REPO = Path(__file__).resolve().parent.parent


def _cpu(func, *args, **kwargs) -> float:
    start = time.process_time()
    func(*args, **kwargs)
    return time.process_time() - start


def main() -> None:
    load_rules()
    docs = load_entry_files(collect_entry_files([REPO / "content"]))
    records = signature_records(docs)
    matcher = PasteMatcher(SignatureMatcher(records), entry_texts(docs), load_model())
    cases = load_corpus(REPO / "tests" / "data" / "real-pastes")
    same = kept = matched = 0
    for case in cases:
        raw = matcher.match(parse_traceback(case.text), likely=False).matches
        red = matcher.match(parse_traceback(redact(case.text, max_chars=10**7)), likely=False)
        first = raw[0].entry_id if raw else None
        again = red.matches[0].entry_id if red.matches else None
        same += first == again
        matched += first is not None
        kept += first is not None and first == again
    print(f"real pastes: {same} of {len(cases)} get the same signature-tier answer redacted")
    print(f"  ({kept} of the {matched} with a signature match keep it)")

    signatures = SignatureMatcher(records)
    examples = [r for r in records if r.example]
    found = sum(
        any(
            hit.signature.entry_id == r.entry_id
            for hit in signatures.match_exception_line(redact(r.example))
        )
        for r in examples
    )
    print(f"entry examples: {found} of {len(examples)} still found by their entry after redaction")

    paste = (REPO / "tests" / "data" / "real-pastes" / "b0" / "001.txt").read_text()[:4000]
    print(f"a typical paste (4,000 chars): {_cpu(redact, paste) * 1000:.2f} ms")
    for size in (500_000, 1_000_000):
        text = hostile_text(size)
        print(f"hostile text, {size:,} chars: {_cpu(redact, text, max_chars=size):.2f} s")
    worst = ('password="' + "secret_" * 34 + " ") * 300
    print(f"library layer, its worst shape: {_cpu(library_findings, worst):.2f} s")


if __name__ == "__main__":
    main()
