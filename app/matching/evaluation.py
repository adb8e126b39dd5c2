"""Measuring the matcher on a corpus of real pastes, and fitting the likely tier's model on one.

A corpus folder holds manifests (`<batch>.json`: a list of cases with `file`, `source`,
`expected` entry or null, `negative`, `format`) and the pasted texts they name. Each case falls in
half "A" or "B" by a hash of its source, so one thread never sits in both halves and the split
never depends on what the matcher does. Fit on one half, report on the other.
"""

import copy
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.matching.calibration import Model, choose_threshold, fit, reliability
from app.matching.likely import FEATURES
from app.matching.memory import PasteMemory, Remembered
from app.matching.paste_matcher import PasteMatcher, paste_query
from app.tracebacks import parse_traceback

# What a claimed negative costs against a positive got right, when the threshold is chosen.
NEGATIVE_COST = 3.0


@dataclass(frozen=True)
class Case:
    file: str
    text: str
    source: str
    expected: str | None
    negative: str | None = None  # hard | other, for negatives
    format: str = ""

    @property
    def half(self) -> str:
        digest = hashlib.sha256(self.source.strip().lower().encode()).hexdigest()
        return "AB"[int(digest[:8], 16) % 2]


def load_corpus(folder: Path) -> list[Case]:
    cases = []
    for manifest in sorted(folder.glob("*.json")):
        for item in json.loads(manifest.read_text(encoding="utf-8")):
            text = (folder / item["file"]).read_bytes().decode("utf-8", errors="replace")
            cases.append(
                Case(
                    file=item["file"],
                    text=text,
                    source=item["source"],
                    expected=item.get("expected"),
                    negative=item.get("negative"),
                    format=item.get("format", ""),
                )
            )
    return cases


@dataclass
class Outcome:
    case: Case
    answer: str | None  # the entry the matcher puts first, or None
    tier: str | None
    confidence: float | None
    # For fitting: every likely candidate's features and whether it is the expected entry,
    # when no signature claimed the paste.
    rows: list[tuple[dict[str, float], bool]]
    top_likely: tuple[float, bool] | None  # (confidence, right) of the best likely candidate

    @property
    def right(self) -> bool:
        return self.answer == self.case.expected


def run(matcher: PasteMatcher, cases: Iterable[Case]) -> list[Outcome]:
    outcomes = []
    for case in cases:
        # A paste's own thread never votes for it (the memory tier holds this corpus).
        result = matcher.match(parse_traceback(case.text), exclude_thread=case.source)
        signature = [m for m in result.matches if m.tier == "signature"]
        rows: list[tuple[dict[str, float], bool]] = []
        top_likely = None
        if not signature:
            for candidate in result.candidates:
                rows.append((dict(candidate.features), candidate.entry_id == case.expected))
            if result.candidates:  # sorted by the model's confidence, best first
                best = result.candidates[0]
                top_likely = (best.confidence, best.entry_id == case.expected)
        first = result.matches[0] if result.matches else None
        outcomes.append(
            Outcome(
                case=case,
                answer=first.entry_id if first else None,
                tier=first.tier if first else None,
                confidence=first.confidence if first else None,
                rows=rows,
                top_likely=top_likely,
            )
        )
    return outcomes


def fit_model(
    outcomes: Sequence[Outcome],
    *,
    fitted_on: str = "",
    negative_cost: float = NEGATIVE_COST,
    features: Sequence[str] = FEATURES,
) -> Model:
    """A model fitted on `outcomes` (their likely candidates), with its threshold."""
    rows = [row for o in outcomes for row in o.rows]
    weights, bias = fit([f for f, _ in rows], [ok for _, ok in rows], features=features)
    model = Model(
        weights=weights, bias=bias, threshold=1.0, features=tuple(features), fitted_on=fitted_on
    )
    positives, negatives = [], []
    for outcome in outcomes:
        if not outcome.rows:
            continue
        confidence, right = max(
            ((model.confidence(f), ok) for f, ok in outcome.rows), key=lambda item: item[0]
        )
        if outcome.case.expected is None:
            negatives.append(confidence)
        else:
            positives.append((confidence, right))
    threshold = choose_threshold(positives, negatives, negative_cost=negative_cost)
    return Model(
        weights=weights,
        bias=bias,
        threshold=threshold,
        features=tuple(features),
        fitted_on=fitted_on,
    )


@dataclass
class Report:
    positives: int
    positives_right: int
    negatives: int
    negatives_clear: int
    by_tier: dict[str, int]
    wrong: list[tuple[str, str | None, str | None, str | None]]  # file, expected, answer, tier
    reliability: list[tuple[str, int, float | None, float | None]]

    @property
    def top1(self) -> float:
        return self.positives_right / self.positives if self.positives else 0.0

    @property
    def negatives_clear_share(self) -> float:
        return self.negatives_clear / self.negatives if self.negatives else 1.0


def report(outcomes: Sequence[Outcome]) -> Report:
    positives = [o for o in outcomes if o.case.expected]
    negatives = [o for o in outcomes if not o.case.expected]
    by_tier: dict[str, int] = {}
    for o in outcomes:
        key = o.tier or "none"
        by_tier[key] = by_tier.get(key, 0) + 1
    scored = [o.top_likely for o in outcomes if o.top_likely is not None]
    return Report(
        positives=len(positives),
        positives_right=sum(1 for o in positives if o.right),
        negatives=len(negatives),
        negatives_clear=sum(1 for o in negatives if o.answer is None),
        by_tier=by_tier,
        wrong=[(o.case.file, o.case.expected, o.answer, o.tier) for o in outcomes if not o.right],
        reliability=reliability(scored),
    )


def memory_of(cases: Iterable[Case]) -> list[Remembered]:
    """What the memory tier keeps of each case (the likely tier's query of it, normalized)."""
    items = []
    for case in cases:
        query = paste_query(parse_traceback(case.text))
        if query is not None:
            items.append(Remembered.of(query, source=case.source, label=case.expected))
    return items


def memory_alone(memory: PasteMemory, cases: Iterable[Case]) -> tuple[int, int, int, int]:
    """The memory tier by itself, leave-one-thread-out: the closest other thread's label as the
    answer. (positives, right, negatives, negatives answered with none)."""
    pos = right = neg = clear = 0
    for case in cases:
        query = paste_query(parse_traceback(case.text))
        near = memory.neighbours(query, exclude_thread=case.source) if query else []
        answer = near[0].item.label if near else None
        if case.expected:
            pos += 1
            right += answer == case.expected
        else:
            neg += 1
            clear += answer is None
    return pos, right, neg, clear


def with_model(matcher: PasteMatcher, model: Model) -> PasteMatcher:
    """The same compiled matcher with another likely model (no recompiling)."""
    clone = copy.copy(matcher)
    clone.model = model
    return clone
