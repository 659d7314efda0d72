"""The audit's metrics as statistics of per-sample columns (docs/metrics.md, "Intervals"), and their paired
bootstrap intervals: per method, of each method's difference from ``laya``, and of a candidate's change from
a baseline audited on the same samples. Torch-free: the audit (``auditing.intervals``) and the gates both use it.

Columns of one method: ``faithfulness`` (ρ, NaN where undefined or degenerate), ``deletion@1``, ``oracle``,
``random`` (Deletion@1's oracle and random expectation), ``aopc``, ``sufficiency@1``, ``keep_oracle``,
``keep_random`` (sufficiency's; read only where sufficiency is defined), ``completeness_error`` and ``ig_effect``
(IG's |δ| and |p_ŷ(x) − p_ŷ(r̄)|), ``randomised`` (ρ with the fully re-initialised head; NaN outside the checked
samples). A metric whose columns are absent (not computed) has no interval.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .bootstrap import (
    Interval,
    column_mean,
    difference,
    interval,
    intervals,
    mean_of,
    one_minus,
    one_minus_ratio,
    ratio_of_gains,
    resampled_means,
    with_estimates,
)

# metric -> (the column whose defined rows it counts, the statistic of column means)
STATISTICS = {
    "faithfulness": ("faithfulness", mean_of("faithfulness"), ("faithfulness",)),
    "deletion@1": ("deletion@1", mean_of("deletion@1"), ("deletion@1",)),
    "deletion@1_normalised": (
        "deletion@1",
        ratio_of_gains("deletion@1", "oracle", "random"),
        ("deletion@1", "oracle", "random"),
    ),
    "aopc": ("aopc", mean_of("aopc"), ("aopc",)),
    "sufficiency@1": ("sufficiency@1", mean_of("sufficiency@1"), ("sufficiency@1",)),
    "sufficiency@1_normalised": (
        "sufficiency@1",
        ratio_of_gains("sufficiency@1", "keep_oracle", "keep_random"),
        ("sufficiency@1", "keep_oracle", "keep_random"),
    ),
    "completeness": (
        "completeness_error",
        one_minus_ratio("completeness_error", "ig_effect"),
        ("completeness_error", "ig_effect"),
    ),
    "randomisation": ("randomised", one_minus("randomised"), ("randomised",)),
}
COLUMNS = (
    "faithfulness",
    "deletion@1",
    "oracle",
    "random",
    "aopc",
    "sufficiency@1",
    "keep_oracle",
    "keep_random",
    "completeness_error",
    "ig_effect",
    "randomised",
)
REFERENCE = "laya"  # every other method's difference is taken from this one
COMMON = ("oracle", "random", "keep_oracle", "keep_random")  # the same for every method (stored once)


def masked(cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A method's columns with sufficiency's oracle and random expectation undefined where its sufficiency is
    (so the normalisation reads the same rows as sufficiency@1, as the point value does)."""
    out = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
    if "sufficiency@1" in out:
        undefined = np.isnan(out["sufficiency@1"])
        for k in ("keep_oracle", "keep_random"):
            if k in out:
                out[k] = np.where(undefined, np.nan, out[k])
    return out


def _of(prefix: str, stat):
    """``stat`` reading the columns of one group (``prefix/column`` keys)."""
    cut = len(prefix) + 1
    return lambda m: stat({k[cut:]: v for k, v in m.items() if k.startswith(prefix + "/")})


def _has(cols: Mapping[str, np.ndarray], metric: str) -> bool:
    return all(c in cols for c in STATISTICS[metric][2])


def _joint(groups: Mapping[str, Mapping[str, np.ndarray]], n_boot: int, seed: int):
    """The point means and the resampled means of every group's columns, on shared resamples."""
    flat = {f"{g}/{c}": np.asarray(v, dtype=np.float64) for g, cols in groups.items() for c, v in cols.items()}
    means = {k: column_mean(v) for k, v in flat.items()}
    return flat, means, resampled_means(flat, n_boot, seed)


def method_intervals(
    columns: Mapping[str, Mapping[str, np.ndarray]], level: float, n_boot: int, seed: int
) -> dict[str, dict[str, dict[str, Interval]]]:
    """Per method: ``intervals`` (metric -> Interval) and ``vs_laya`` (metric -> Interval of method − laya,
    paired), from each method's per-sample columns; every method and metric on the same resamples. Each metric's
    statistic is evaluated once per method, on its draws and estimate together (``with_estimates``), and every
    interval's percentiles come from one call (``intervals``): the numbers of one ``interval`` per metric."""
    columns = {m: masked(cols) for m, cols in columns.items()}
    flat, means, draws = _joint(columns, n_boot, seed)
    both = with_estimates(means, draws)
    defined = {k: ~np.isnan(v) for k, v in flat.items()}
    values, n_defined, where = [], [], []  # one row per interval, and where it goes: (method, part, metric)
    stats = {}  # (method, metric) -> the statistic on the method's draws and estimate
    with np.errstate(invalid="ignore", divide="ignore"):
        for m, cols in columns.items():
            own = {c: both[f"{m}/{c}"] for c in cols}
            for metric, (_, stat, _) in STATISTICS.items():
                if _has(cols, metric):
                    stats[m, metric] = np.asarray(stat(own), dtype=np.float64)
        for m in columns:
            for metric, (count, _, _) in STATISTICS.items():
                if (m, metric) not in stats:
                    continue
                values.append(stats[m, metric])
                n_defined.append(int(defined[f"{m}/{count}"].sum()))
                where.append((m, "intervals", metric))
                if m != REFERENCE and (REFERENCE, metric) in stats:
                    values.append(stats[m, metric] - stats[REFERENCE, metric])
                    n_defined.append(int((defined[f"{m}/{count}"] & defined[f"{REFERENCE}/{count}"]).sum()))
                    where.append((m, "vs_laya", metric))
    out = {m: {"intervals": {}, "vs_laya": {}} for m in columns}
    for (m, part, metric), found in zip(where, intervals(values, level, n_defined), strict=True):
        out[m][part][metric] = found
    return out


def paired_change(
    baseline: Mapping[str, np.ndarray],
    current: Mapping[str, np.ndarray],
    metric: str,
    level: float,
    n_boot: int,
    seed: int,
) -> Interval | None:
    """The change current − baseline of ``metric`` with its paired interval (both measured on the same samples,
    row for row); None when either lacks the metric's columns."""
    if not (_has(baseline, metric) and _has(current, metric)):
        return None
    need = STATISTICS[metric][2]
    baseline, current = masked(baseline), masked(current)
    groups = {"base": {c: baseline[c] for c in need}, "now": {c: current[c] for c in need}}
    flat, means, draws = _joint(groups, n_boot, seed)
    count = STATISTICS[metric][0]
    n_def = int((~np.isnan(flat[f"base/{count}"]) & ~np.isnan(flat[f"now/{count}"])).sum())
    stat = STATISTICS[metric][1]
    return interval(difference(_of("now", stat), _of("base", stat)), means, draws, level, n_def)
