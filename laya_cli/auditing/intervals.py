"""Bootstrap intervals of a head-scope audit (``--ci``, ``--bootstrap``; docs/metrics.md, "Intervals"): the
per-sample columns of each method, read from the rows ``run_audit`` gathered, and their paired intervals
(``stats.audit_columns``), attached to the result's ``MethodScores``; the columns themselves go to the JSON,
compactly, so a later ``--baseline`` gate can pair its samples with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from torch import Tensor

from ..stats.audit_columns import COLUMNS, method_intervals

_SEED = 0xB007  # offset of the bootstrap's seed from the audit's --seed


def method_columns(
    per: Mapping[str, Tensor], common: Mapping[str, Tensor], groups: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """One method's per-sample columns (float64, NaN where undefined); those not computed (``groups``: the deeper
    metric groups the audit computed) are absent."""
    cols: dict[str, Tensor] = {"oracle": common["oracle"], "random": common["random"]}
    if "rho" in per:
        cols["faithfulness"] = per["rho"].double().masked_fill(common["degenerate"], float("nan"))
    if "d1" in per:
        cols["deletion@1"] = per["d1"]
    if "aopc" in per:
        cols["aopc"] = per["aopc"]
    if "sufficiency" in per:  # (keep_oracle and keep_random are masked where it is undefined: audit_columns)
        cols["sufficiency@1"] = per["sufficiency"]
        cols["keep_oracle"], cols["keep_random"] = common["keep_oracle"], common["keep_random"]
    if "completeness" in groups and "completeness_error" in per:  # IG: its |δ| and the effect it explains
        cols["completeness_error"], cols["ig_effect"] = per["completeness_error"], common["effect"]
    stages = sum(k.startswith("randomised") for k in per)  # randomised0 … randomised{S−1}
    if "randomisation" in groups and stages:  # the fully re-initialised head: the last stage
        cols["randomised"] = per[f"randomised{stages - 1}"]
    return {k: _on_host(cols[k]) for k in COLUMNS if k in cols}


def _on_host(column: Tensor | np.ndarray) -> np.ndarray:
    return column if isinstance(column, np.ndarray) else column.double().cpu().numpy()


_SHARED = ("oracle", "random", "keep_oracle", "keep_random", "effect")  # the same columns for every method


def attach_intervals(result, per: Mapping[str, Mapping[str, Tensor]], common: Mapping[str, Tensor], settings) -> None:
    """Keep each available method's columns on ``result`` and, unless ``settings.ci`` is 0, attach the
    intervals of its metrics and of its differences from ``laya`` to its ``MethodScores``."""
    common = {**common, **{k: _on_host(common[k]) for k in _SHARED if k in common}}  # once, not once per method
    columns = {m: method_columns(per[m], common, result.groups) for m in per if result.methods[m].available}
    result.columns = columns
    level, n_boot = getattr(settings, "ci", 0.0), getattr(settings, "bootstrap", 0)
    if not level or not n_boot or not columns:
        return
    result.interval_settings = {"level": level, "bootstrap": n_boot, "seed": settings.seed + _SEED}
    for m, found in method_intervals(columns, level, n_boot, settings.seed + _SEED).items():
        result.methods[m].intervals = found["intervals"]
        result.methods[m].vs_laya = found["vs_laya"]


def class_intervals(by_class: dict, rows: Mapping[str, np.ndarray], columns: Mapping | None, settings) -> None:
    """``--by-class``: each class's intervals, as the overall ones (the same bootstrap, on the samples of that
    class: ``rows``, class name -> boolean mask), attached to its ``MethodScores`` unless ``settings.ci`` is 0."""
    level, n_boot = getattr(settings, "ci", 0.0), getattr(settings, "bootstrap", 0)
    if not level or not n_boot or not columns:
        return
    for name, mask in rows.items():
        own = {m: {k: v[mask] for k, v in cols.items()} for m, cols in columns.items()}
        for m, found in method_intervals(own, level, n_boot, settings.seed + _SEED).items():
            if m in by_class[name].methods:
                by_class[name].methods[m].intervals = found["intervals"]
                by_class[name].methods[m].vs_laya = found["vs_laya"]


def network_intervals(methods: dict, rho: Mapping, d1: Mapping, common: Mapping[str, Tensor], settings) -> None:
    """The network scope's intervals (faithfulness and Deletion@1 with its normalisation, per method and of its
    difference from ``laya``), attached to its ``MethodScores`` unless ``settings.ci`` is 0."""
    level, n_boot = getattr(settings, "ci", 0.0), getattr(settings, "bootstrap", 0)
    if not level or not n_boot:
        return
    columns = network_columns(methods, rho, d1, common)
    for m, found in method_intervals(columns, level, n_boot, settings.seed + _SEED).items():
        methods[m].intervals = found["intervals"]
        methods[m].vs_laya = found["vs_laya"]


def network_columns(methods: dict, rho: Mapping, d1: Mapping, common: Mapping[str, Tensor]) -> dict[str, dict]:
    """Each available method's per-sample columns at network scope (faithfulness NaN where the effects are
    degenerate, Deletion@1, its oracle and random expectation), as ``method_columns`` gives them at head scope."""
    nan = float("nan")
    oracle, random = _on_host(common["oracle"]), _on_host(common["random"])
    return {
        m: {
            "faithfulness": rho[m].double().masked_fill(common["degenerate"], nan).cpu().numpy(),
            "deletion@1": d1[m].double().cpu().numpy(),
            "oracle": oracle,
            "random": random,
        }
        for m, s in methods.items()
        if s.available and m in rho and m in d1
    }
