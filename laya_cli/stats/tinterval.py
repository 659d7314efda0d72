"""Student-t intervals of a mean over a few runs (``laya bench``: seeds), and of a paired difference."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TInterval:
    mean: float
    std: float  # n − 1
    low: float
    high: float
    n: int


def t_quantile(q: float, df: int) -> float:
    """The q-quantile of Student's t with ``df`` degrees of freedom (scipy when present, else a table-free
    Cornish–Fisher expansion, accurate to ~1e-3 for df ≥ 2)."""
    try:
        from scipy.stats import t

        return float(t.ppf(q, df))
    except ImportError:  # pragma: no cover - scipy ships with the test and full extras
        z = _normal_quantile(q)
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
        return z + g1 / df + g2 / df**2 + g3 / df**3


def _normal_quantile(q: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


def t_interval(values, level: float = 0.95) -> TInterval:
    """Mean ± t_{(1+level)/2, n−1} · std / √n of the defined (non-NaN) values; NaN bounds below two values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    n = len(v)
    if n == 0:
        return TInterval(math.nan, math.nan, math.nan, math.nan, 0)
    mean = float(v.mean())
    if n < 2:
        return TInterval(mean, math.nan, math.nan, math.nan, n)
    std = float(v.std(ddof=1))
    half = t_quantile((1 + level) / 2, n - 1) * std / math.sqrt(n)
    return TInterval(mean, std, mean - half, mean + half, n)
