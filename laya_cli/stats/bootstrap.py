"""A seeded, vectorised, paired percentile bootstrap of means over samples (docs/metrics.md, "Intervals").

Every statistic here is a function of column means: a column is one per-sample number (a method's
faithfulness ρ, its Deletion@1, …) with NaN where that sample is undefined, and its mean ignores the
NaN rows (as the point estimate does). A resample draws n rows with replacement; its weights are the
row counts, so the mean of every column on every resample is one matrix product, (B × n) @ (n × k),
done in chunks of resamples to bound memory. All columns share the same resamples: intervals of
differences (method − ``laya``, candidate − baseline) are *paired*, so what the samples have in common
cancels out. The interval is the percentile interval (``scipy.stats.bootstrap(method="percentile")``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# Resamples per matrix product: at most 128, and at most CHUNK_CELLS draws × rows, so the few (draws, n) arrays a
# chunk holds (indices, counts) stay near 4 MB each whatever n (memory flat in the number of audited samples;
# numpy's draws do not depend on the chunking, so neither do the resamples).
CHUNK = 128
CHUNK_CELLS = 1 << 19


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile interval; ``n_defined``: the samples the estimate stands on."""

    estimate: float
    low: float
    high: float
    n_defined: int
    level: float = 0.95

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def to_dict(self) -> dict:
        return {"ci_low": _num(self.low), "ci_high": _num(self.high), "n_defined": self.n_defined}


def _num(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def resample_counts(rng: np.random.Generator, draws: int, n: int) -> np.ndarray:
    """(draws, n) float64: how often each row is drawn in each of ``draws`` resamples of n rows with
    replacement. The indices are ``rng.integers(0, n, (draws, n))``, row by row (a by-hand loop that draws
    the same indices gets the same resamples)."""
    idx = rng.integers(0, n, size=(draws, n))
    flat = idx + (np.arange(draws) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=draws * n).reshape(draws, n).astype(np.float64)


def resampled_means(columns: Mapping[str, np.ndarray], n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """The mean of each column, NaN rows ignored, on each of ``n_boot`` resamples of the rows (the same
    resamples for every column: paired). A resample in which a column has no defined row gives NaN."""
    names = list(columns)
    if not names:
        return {}
    data = np.stack([np.asarray(columns[k], dtype=np.float64) for k in names], axis=1)  # (n, k)
    n = data.shape[0]
    if n == 0 or n_boot <= 0:
        return {k: np.full(max(n_boot, 0), np.nan) for k in names}
    defined = ~np.isnan(data)
    values = np.where(defined, data, 0.0)
    counts = defined.astype(np.float64)
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, len(names)))
    chunk = max(1, min(CHUNK, CHUNK_CELLS // n))
    for start in range(0, n_boot, chunk):
        w = resample_counts(rng, min(chunk, n_boot - start), n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + len(w)] = (w @ values) / (w @ counts)
    return {k: out[:, j] for j, k in enumerate(names)}


def column_mean(values: np.ndarray) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(v.mean()) if len(v) else float("nan")


def percentile_interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    """The (1 − level)/2 and (1 + level)/2 percentiles of the bootstrap draws (NaN draws ignored)."""
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if not len(d):
        return float("nan"), float("nan")
    lo, hi = np.percentile(d, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def percentile_intervals(draws: np.ndarray, level: float) -> np.ndarray:
    """(k, 2): ``percentile_interval`` of each row of the (k, B) draws, NaN draws ignored. The rows whose draws are
    all finite go through one ``np.percentile`` along the rows (its values per row are those of the row alone: the
    same partition and interpolation, elementwise); a row with a non-finite draw is done alone, as before."""
    d = np.asarray(draws, dtype=np.float64)
    out = np.empty((d.shape[0], 2))
    finite = np.isfinite(d).all(axis=1) & (d.shape[1] > 0)
    if finite.any():
        out[finite] = np.percentile(d[finite], [50 * (1 - level), 50 * (1 + level)], axis=1).T
    for i in np.flatnonzero(~finite):
        out[i] = percentile_interval(d[i], level)
    return out


Statistic = Callable[[Mapping[str, np.ndarray | float]], np.ndarray | float]


def interval(
    statistic: Statistic, means: Mapping[str, float], draws: Mapping[str, np.ndarray], level: float, n_defined: int
) -> Interval:
    """A statistic of column means (``statistic(means)``; e.g. ``lambda m: m["a"] - m["b"]``) with its
    percentile interval over the bootstrap draws of those means (``resampled_means``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        estimate = float(statistic(means))
        low, high = percentile_interval(np.asarray(statistic(draws), dtype=np.float64), level)
    return Interval(estimate, low, high, n_defined, level)


def with_estimates(means: Mapping[str, float], draws: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each column's bootstrap draws with its point mean appended last: a statistic of column means evaluated once
    on these gives its draws and, last, its estimate (its arithmetic is elementwise: the same bits as on each)."""
    return {k: np.append(draws[k], means[k]) for k in draws}


def intervals(values: Sequence[np.ndarray], level: float, n_defined: Sequence[int]) -> list[Interval]:
    """The intervals of many statistics at once: each of ``values`` a statistic evaluated on ``with_estimates``
    (its B draws, then its estimate); the i-th ``Interval`` is what ``interval`` gives that statistic."""
    if not len(values):
        return []
    values = np.stack([np.asarray(v, dtype=np.float64) for v in values])
    bounds = percentile_intervals(values[:, :-1], level)
    return [
        Interval(float(v), float(lo), float(hi), int(n), level)
        for v, (lo, hi), n in zip(values[:, -1], bounds, n_defined, strict=True)
    ]


def ratio_of_gains(value: str, oracle: str, random: str) -> Statistic:
    """(value − random) / (oracle − random) of column means (Deletion@1's normalisation); NaN when oracle = random."""

    def stat(m):
        gap = np.asarray(m[oracle]) - np.asarray(m[random])
        out = (np.asarray(m[value]) - np.asarray(m[random])) / np.where(np.abs(gap) > 1e-12, gap, np.nan)
        return out if np.ndim(out) else float(out)

    return stat


def mean_of(name: str) -> Statistic:
    return lambda m: m[name]


def one_minus_ratio(num: str, den: str) -> Statistic:
    """1 − num / den of column means (IG's completeness: 1 − mean |δ| / mean |Δf|); NaN when den is ~0."""

    def stat(m):
        d = np.asarray(m[den])
        out = 1 - np.asarray(m[num]) / np.where(np.abs(d) > 1e-12, d, np.nan)
        return out if np.ndim(out) else float(out)

    return stat


def one_minus(name: str) -> Statistic:
    """1 − the column mean (the model-randomisation check: 1 − mean ρ with the re-initialised head)."""
    return lambda m: 1 - np.asarray(m[name]) if np.ndim(m[name]) else 1 - float(m[name])


def difference(a: Statistic, b: Statistic) -> Statistic:
    """a − b, on the same resamples (paired)."""
    return lambda m: np.asarray(a(m)) - np.asarray(b(m))
