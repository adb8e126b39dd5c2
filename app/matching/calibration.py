"""A calibrated confidence for the likely tier: logistic regression over the candidates' features.

`fit` learns weights by Newton's method (a dozen steps over a few hundred rows; L2-regularized so
that a feature seen only once cannot take over), `choose_threshold` picks the lowest confidence
that still keeps the claimed share of the negatives under a ceiling, and `reliability` tabulates
confidence against the share that was right, the table that shows whether a 0.8 means 80 %.

The shipped model (`likely_model.json`) is fitted by `bench/calibration.py --write` on every real
paste; accuracy is always reported on a half the model was not fitted on.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from app.matching.likely import FEATURES

MODEL_FILE = Path(__file__).with_name("likely_model.json")


@dataclass(frozen=True)
class Model:
    weights: tuple[float, ...]
    bias: float
    threshold: float
    features: tuple[str, ...] = FEATURES
    fitted_on: str = ""

    def confidence(self, features: dict[str, float]) -> float:
        z = self.bias + sum(
            w * features.get(n, 0.0) for w, n in zip(self.weights, self.features, strict=True)
        )
        return _sigmoid(z)

    def to_json(self) -> str:
        return json.dumps(
            {
                "features": list(self.features),
                "weights": [round(w, 6) for w in self.weights],
                "bias": round(self.bias, 6),
                "threshold": round(self.threshold, 4),
                "fitted_on": self.fitted_on,
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> "Model":
        data = json.loads(text)
        names = tuple(data["features"])
        if set(names) - set(FEATURES):
            raise ValueError(f"unknown features in the model: {sorted(set(names) - set(FEATURES))}")
        return cls(
            weights=tuple(float(w) for w in data["weights"]),
            bias=float(data["bias"]),
            threshold=float(data["threshold"]),
            features=names,
            fitted_on=str(data.get("fitted_on", "")),
        )


def load_model(path: Path = MODEL_FILE) -> Model:
    return Model.from_json(path.read_text(encoding="utf-8"))


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1 / (1 + math.exp(-z))
    e = math.exp(z)
    return e / (1 + e)


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the matrix is small and positive definite)."""
    n = len(vector)
    a = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for row in range(col + 1, n):
            factor = a[row][col] / a[col][col]
            for k in range(col, n + 1):
                a[row][k] -= factor * a[col][k]
    out = [0.0] * n
    for row in range(n - 1, -1, -1):
        out[row] = (a[row][n] - sum(a[row][k] * out[k] for k in range(row + 1, n))) / a[row][row]
    return out


def fit(
    rows: Sequence[dict[str, float]],
    labels: Sequence[bool],
    *,
    l2: float = 1.0,
    steps: int = 25,
    features: Sequence[str] = FEATURES,
) -> tuple[tuple[float, ...], float]:
    """Weights and bias of a logistic regression of `labels` on the rows' `features`."""
    xs = [[1.0] + [row.get(name, 0.0) for name in features] for row in rows]
    ys = [1.0 if y else 0.0 for y in labels]
    n = len(features) + 1
    beta = [0.0] * n
    for _ in range(steps):
        gradient = [0.0] * n
        hessian = [[0.0] * n for _ in range(n)]
        for x, y in zip(xs, ys, strict=True):
            p = _sigmoid(sum(b * v for b, v in zip(beta, x, strict=True)))
            w = p * (1 - p)
            for i in range(n):
                gradient[i] += (y - p) * x[i]
                for j in range(i, n):
                    hessian[i][j] += w * x[i] * x[j]
        for i in range(1, n):  # the bias is not penalized
            gradient[i] -= l2 * beta[i]
            hessian[i][i] += l2
        for i in range(n):
            for j in range(i):
                hessian[i][j] = hessian[j][i]
        step = _solve(hessian, gradient)
        beta = [b + s for b, s in zip(beta, step, strict=True)]
        if max(abs(s) for s in step) < 1e-8:
            break
    return tuple(beta[1:]), beta[0]


def choose_threshold(
    positives: Sequence[tuple[float, bool]],
    negatives: Sequence[float],
    *,
    negative_cost: float = 3.0,
) -> float:
    """The threshold that gets the most positives right while claiming few negatives.

    `positives` holds (confidence, whether the top candidate is the right entry) for pastes that
    an entry explains but no signature matched; `negatives` the confidences of the top candidate
    for pastes that no entry explains. A positive above the threshold counts when it is right and
    costs when it is wrong; a negative above it costs `negative_cost` (a false claim on an error
    we know nothing of does more harm than a missed likely match, which still shows as related).
    """
    candidates = sorted({c for c, _ in positives} | set(negatives) | {0.5})
    best, best_score = 0.99, -math.inf
    for t in candidates:
        claimed = sum(1 for c in negatives if c >= t)
        right = sum(1 for c, ok in positives if c >= t and ok)
        wrong = sum(1 for c, ok in positives if c >= t and not ok)
        score = right - wrong - negative_cost * claimed
        if score > best_score:
            best, best_score = t, score
    return best


def reliability(
    scored: Sequence[tuple[float, bool]], edges: Sequence[float] = (0, 0.2, 0.4, 0.6, 0.8, 1.0)
) -> list[tuple[str, int, float | None, float | None]]:
    """(bucket, count, mean confidence, share correct) per confidence bucket."""
    table = []
    for low, high in pairwise(edges):
        inside = [(c, ok) for c, ok in scored if low <= c < high or (high == 1.0 and c == 1.0)]
        mean = sum(c for c, _ in inside) / len(inside) if inside else None
        share = sum(1 for _, ok in inside if ok) / len(inside) if inside else None
        table.append((f"{low:.1f}–{high:.1f}", len(inside), mean, share))
    return table
