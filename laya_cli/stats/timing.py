"""Wall times as measurements (docs/depth.md, "Timing"): per timed model, the median of its rounds with an interval;
a time fraction or a speed-up from the rounds themselves, paired (each round times every model in turn, so a change
of machine load hits all alike), with its interval; and the word for a result the machine was too noisy to give.

The interval is the distribution-free one of a median (order statistics of the rounds: ``median_interval``): for 5
rounds the lowest and highest (93.8 % coverage), for 10 the 2nd and 9th (97.9 %); more rounds narrow it. Pure
Python: no torch, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_ROUNDS = 3  # fewer rounds give no interval: a single timing, not a measurement
LEVEL = 0.95  # the coverage the median's interval aims at (the most the rounds allow under it)
NOISE_WIDTH = 0.2  # an interval wider than this × max(1, the median): too noisy to tell (20 points of a time
# fraction; 20 % of a speed-up)


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float] | None:
    """(low, high, coverage): the widest-ranked order statistics [x_(j), x_(n+1-j)] whose coverage of the median,
    1 − 2·P(Binomial(n, ½) < j), is at least ``level`` — or, where no j reaches it (under 6 rounds), the lowest and
    highest value with the coverage they have. None under ``MIN_ROUNDS`` values."""
    s, n = sorted(values), len(values)
    if n < MIN_ROUNDS:
        return None
    below = lambda j: sum(math.comb(n, i) for i in range(j)) / 2**n  # noqa: E731  P(Binomial(n, ½) < j)
    j = 1
    while j + 1 <= n // 2 and 1 - 2 * below(j + 1) >= level:
        j += 1
    return s[j - 1], s[n - j], 1 - 2 * below(j)


def ratio_summary(numerators: Sequence[float], denominators: Sequence[float]) -> dict:
    """A ratio of two models' times measured round by round (``numerators[r] / denominators[r]``): its median, its
    interval (None under ``MIN_ROUNDS`` rounds) and whether that interval is wider than ``NOISE_WIDTH`` × max(1,
    the median): 20 points of a fraction of the full model's time, 20 % of a speed-up."""
    ratios = [a / b for a, b in zip(numerators, denominators) if b > 0]
    if not ratios:
        return {"value": None, "interval": None, "noisy": False, "rounds": 0}
    interval, value = median_interval(ratios), median(ratios)
    noisy = interval is not None and interval[1] - interval[0] > NOISE_WIDTH * max(1.0, abs(value))
    return {
        "value": value,
        "interval": None if interval is None else [interval[0], interval[1]],
        "coverage": None if interval is None else interval[2],
        "noisy": noisy,
        "rounds": len(ratios),
    }


def seconds_summary(rounds: Sequence[float], per: int) -> dict:
    """A model's time per input (``per`` inputs a round): the median of the rounds and its interval (None under
    ``MIN_ROUNDS`` rounds)."""
    interval = median_interval(rounds)
    return {
        "seconds": median(rounds) / per,
        "interval": None if interval is None else [interval[0] / per, interval[1] / per],
    }


def speedup_verdict(summary: dict) -> str:
    """What a speed-up's rounds say (``ratio_summary`` of the full model's times over the smaller one's): 'faster'
    or 'slower' where its interval excludes 1 and is narrow enough for one number; 'faster, noisy' or 'slower,
    noisy' where it excludes 1 but is too wide for one (the direction is measured, the size is not); 'noisy' where
    it holds 1 and is wide (the machine too busy to tell), 'same' where it holds 1 and is narrow (no measurable
    change); 'single' without an interval (under ``MIN_ROUNDS`` rounds)."""
    interval = summary.get("interval")
    if summary.get("value") is None or interval is None:
        return "single"
    noisy = ", noisy" if summary["noisy"] else ""
    if interval[0] > 1:
        return "faster" + noisy
    if interval[1] < 1:
        return "slower" + noisy
    return "noisy" if summary["noisy"] else "same"
