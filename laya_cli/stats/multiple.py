"""Multiple-testing corrections of a family of p-values: Holm (family-wise error) and Benjamini–Hochberg (false
discovery rate), returning adjusted p-values in the input order (as ``statsmodels.stats.multitest.multipletests``
with ``holm`` / ``fdr_bh``). NaN p-values (untested) stay NaN and do not count."""

from __future__ import annotations

import numpy as np

CORRECTIONS = ("holm", "bh", "none")


def _ranked(p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p as float64, an all-NaN output like it, the indices of its defined p-values in ascending order)."""
    p = np.asarray(p, dtype=np.float64)
    ok = np.flatnonzero(~np.isnan(p))
    return p, np.full_like(p, np.nan), ok[np.argsort(p[ok], kind="stable")]


def holm(p) -> np.ndarray:
    p, out, order = _ranked(p)
    m = len(order)
    if m:
        out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def benjamini_hochberg(p) -> np.ndarray:
    p, out, order = _ranked(p)
    m = len(order)
    if m:
        scaled = p[order] * m / np.arange(1, m + 1)
        out[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return out


def adjust(p, method: str) -> np.ndarray:
    return {"holm": holm, "bh": benjamini_hochberg, "none": lambda x: np.asarray(x, dtype=np.float64)}[method](p)
