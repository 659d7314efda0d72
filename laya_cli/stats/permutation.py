"""A paired permutation test of the difference between two models' mean layer profiles (``laya diff``).

Each sample x has a profile under model A and one under model B (α(x), or another distribution over layers).
Under the null hypothesis that the two models use their layers alike, which model a sample's two profiles came
from is exchangeable: a permutation swaps A and B on each sample independently with probability ½ (the paired
analogue of shuffling labels). The statistic is the Jensen–Shannon divergence between the mean profiles; the
p-value is (1 + #{permuted ≥ observed}) / (1 + permutations), never 0. Vectorised: every permutation's mean
profiles are one matrix product of the swap matrix with the per-sample differences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .divergence import jensen_shannon

CHUNK = 256  # permutations per matrix product


@dataclass(frozen=True)
class PermutationTest:
    statistic: float  # the observed Jensen–Shannon divergence of the mean profiles (bits)
    p_value: float
    permutations: int


def swap_signs(rng: np.random.Generator, draws: int, n: int) -> np.ndarray:
    """(draws, n) of ±1: −1 where a permutation swaps a sample's A and B (``rng.random(...) < 0.5``)."""
    return np.where(rng.random((draws, n)) < 0.5, -1.0, 1.0)


def paired_profile_test(a: np.ndarray, b: np.ndarray, permutations: int, seed: int) -> PermutationTest:
    """``a``, ``b``: (n, L) per-sample profiles of the same n samples under models A and B."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = len(a)
    observed = float(jensen_shannon(a.mean(0), b.mean(0))) if n else float("nan")
    if n == 0 or permutations <= 0:
        return PermutationTest(observed, float("nan"), 0)
    centre, half = (a + b) / 2, (a - b) / 2  # a swap flips the sign of the half-difference
    mean_centre = centre.mean(0)
    rng = np.random.default_rng(seed)
    exceed = 0
    for start in range(0, permutations, CHUNK):
        signs = swap_signs(rng, min(CHUNK, permutations - start), n)
        shift = signs @ half / n  # (draws, L): mean of ±half
        js = jensen_shannon(mean_centre + shift, mean_centre - shift)
        exceed += int((js >= observed - 1e-12).sum())
    return PermutationTest(observed, (1 + exceed) / (1 + permutations), permutations)
