"""Intervals of a proportion (an accuracy: k correct of n), closed form, numpy-free: the Wilson score interval
(Wilson 1927), and Newcombe's hybrid score interval of a difference of two proportions (Newcombe 1998, method
10), built from the two Wilson intervals. ``--gate-on bound`` decides an accuracy gate on them (docs/ci.md)."""

from __future__ import annotations

import math
from statistics import NormalDist

from .bootstrap import Interval


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson(correct: int, n: int, level: float = 0.95) -> Interval:
    """The Wilson score interval of ``correct / n`` (NaN bounds when ``n`` is 0). Unlike the normal ("Wald")
    interval it stays inside [0, 1] and keeps its coverage near 0 and 1, where accuracies live."""
    if n <= 0:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    z, p = _z(level), correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if correct <= 0 else max(0.0, centre - half)  # exactly 0 (1) at 0 (n) correct, not 1e-17 off
    high = 1.0 if correct >= n else min(1.0, centre + half)
    return Interval(p, low, high, n, level)


def newcombe_difference(base: tuple[int, int], now: tuple[int, int], level: float = 0.95) -> Interval:
    """The interval of ``now − base`` (each ``(correct, n)``) by Newcombe's hybrid score method: the two Wilson
    intervals combined as if the samples were independent. On the same samples (a --baseline audit) the two
    accuracies are positively correlated, so this interval is wider than a paired one: it errs toward
    inconclusive, never toward a false pass or fail."""
    b, c = wilson(*base, level), wilson(*now, level)
    if not (base[1] and now[1]):
        return Interval(math.nan, math.nan, math.nan, 0, level)
    d = c.estimate - b.estimate
    low = d - math.sqrt((c.estimate - c.low) ** 2 + (b.high - b.estimate) ** 2)
    high = d + math.sqrt((c.high - c.estimate) ** 2 + (b.estimate - b.low) ** 2)
    return Interval(d, low, high, min(base[1], now[1]), level)
