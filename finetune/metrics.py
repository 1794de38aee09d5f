"""Classification and regression metrics as GLUE's leaderboard computes them, in plain Python; inputs
of different lengths, or none, are a ``ValueError``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence


def _check(predictions: Sequence, labels: Sequence) -> None:
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    if not labels:
        raise ValueError("no examples to score")


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """The share of predictions equal to their label."""
    _check(predictions, labels)
    return sum(p == y for p, y in zip(predictions, labels, strict=True)) / len(labels)


def f1(predictions: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """Binary F1 of class ``positive``: 2·TP / (2·TP + FP + FN); 0 when there is no TP."""
    _check(predictions, labels)
    tp = sum(p == y == positive for p, y in zip(predictions, labels, strict=True))
    guessed_and_true = list(predictions).count(positive) + list(labels).count(positive)
    return 2 * tp / guessed_and_true if tp else 0.0


def matthews_corrcoef(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation of binary predictions (0 for an empty confusion row or column, as sklearn)."""
    _check(predictions, labels)
    pairs = list(zip(predictions, labels, strict=True))
    tp = sum(p == 1 and y == 1 for p, y in pairs)
    tn = sum(p == 0 and y == 0 for p, y in pairs)
    fp = sum(p == 1 and y == 0 for p, y in pairs)
    fn = sum(p == 0 and y == 1 for p, y in pairs)
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation coefficient (0 when either side is constant)."""
    _check(x, y)
    n = len(x)
    mean_x, mean_y = sum(x) / n, sum(y) / n
    cov = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y, strict=True))
    var_x = sum((a - mean_x) ** 2 for a in x)
    var_y = sum((b - mean_y) ** 2 for b in y)
    return cov / math.sqrt(var_x * var_y) if var_x > 0 and var_y > 0 else 0.0


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of their ranks (``scipy.stats.rankdata``'s default)."""
    result = [0.0] * len(values)
    order = enumerate(sorted(range(len(values)), key=lambda i: values[i]))
    for _, tied in itertools.groupby(order, key=lambda pair: values[pair[1]]):
        tied = list(tied)
        for _, index in tied:
            result[index] = (tied[0][0] + tied[-1][0]) / 2 + 1
    return result


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's over tie-averaged ranks."""
    _check(x, y)
    return pearson(ranks(x), ranks(y))


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    if not values:
        raise ValueError("no values")
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
