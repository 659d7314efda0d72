"""Class × layer statistics of per-sample layer scores: profiles and attention shift.

Pure functions of a per-sample table (pandas) with columns ``label``, ``correct`` and one
column per layer and quantity (``alpha[<layer>]``, ``contrib[<layer>]``); what ``laya export``
writes as profiles.csv, global_profile.csv and attention_shift.csv (docs/export.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..auditing.diff.settings import PRACTICAL_JS_BITS

SUBSETS = ("all", "correct", "incorrect")
# An attention shift is ranked from this JS divergence on (bits): the practical size laya diff calls a change
# (docs/export.md, "Attention shift"); below it a class's correct and incorrect profiles are the same for a reader.
SHIFT_RANKED_FROM = PRACTICAL_JS_BITS


def alpha_col(layer: str) -> str:
    return f"alpha[{layer}]"


def contrib_col(layer: str) -> str:
    return f"contrib[{layer}]"


def subset_mask(table: pd.DataFrame, subset: str) -> np.ndarray:
    correct = table["correct"].to_numpy(dtype=bool)
    return {"all": np.ones(len(table), dtype=bool), "correct": correct, "incorrect": ~correct}[subset]


def _mean_std(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and sample std (ddof=1, as pandas); NaN where there are too few rows."""
    n = len(values)
    width = values.shape[1]
    mean = values.mean(0) if n else np.full(width, np.nan)
    std = values.std(0, ddof=1) if n > 1 else np.full(width, np.nan)
    return mean, std


def class_layer_profiles(
    table: pd.DataFrame, layers: Sequence[str], classes: Sequence[str], quantities: Sequence[str] = ("alpha",)
) -> pd.DataFrame:
    """Long table of mean/std/n per (quantity, subset, true class, layer); n=0 rows have NaN stats."""
    labels = table["label"].to_numpy()
    rows = []
    for quantity in quantities:
        col = alpha_col if quantity == "alpha" else contrib_col
        values = table[[col(name) for name in layers]].to_numpy(dtype=float)
        for subset in SUBSETS:
            mask = subset_mask(table, subset)
            for c, cname in enumerate(classes):
                sel = values[mask & (labels == c)]
                mean, std = _mean_std(sel)
                for i, name in enumerate(layers):
                    rows.append((quantity, subset, c, cname, name, i, mean[i], std[i], len(sel)))
    return pd.DataFrame(
        rows, columns=["quantity", "subset", "class", "class_name", "layer", "layer_index", "mean", "std", "n"]
    )


def global_profile(table: pd.DataFrame, layers: Sequence[str], quantities: Sequence[str] = ("alpha",)) -> pd.DataFrame:
    """Long table of mean/std/n per (quantity, subset, layer) over all classes."""
    rows = []
    for quantity in quantities:
        col = alpha_col if quantity == "alpha" else contrib_col
        values = table[[col(name) for name in layers]].to_numpy(dtype=float)
        for subset in SUBSETS:
            sel = values[subset_mask(table, subset)]
            mean, std = _mean_std(sel)
            for i, name in enumerate(layers):
                rows.append((quantity, subset, name, i, mean[i], std[i], len(sel)))
    return pd.DataFrame(rows, columns=["quantity", "subset", "layer", "layer_index", "mean", "std", "n"])


def js_divergence(p: Sequence[float], q: Sequence[float], base: float = 2.0) -> float:
    """Jensen–Shannon divergence (not distance) of two distributions; in [0, 1] for base 2.

    Inputs are normalised to sum 1 first. NaN if either has no mass or contains NaN.
    ``scipy.spatial.distance.jensenshannon(p, q, base=2) ** 2`` gives the same number.
    """
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if not (np.isfinite(p).all() and np.isfinite(q).all()) or p.sum() <= 0 or q.sum() <= 0:
        return float("nan")
    p, q = p / p.sum(), q / q.sum()
    m = 0.5 * (p + q)

    def kl(a: np.ndarray, b: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / b[nz])))

    return max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m)) / math.log(base)


def attention_shift(table: pd.DataFrame, layers: Sequence[str], classes: Sequence[str]) -> pd.DataFrame:
    """Per true class: JS divergence between mean α of correct and of incorrect predictions, ranked.

    Sorted by divergence, largest first; ``rank`` (1, 2, …) only for a divergence of at least ``SHIFT_RANKED_FROM``
    bits, <NA> below it (a shift too small to mean anything is not ranked) and for classes without correct or
    without incorrect predictions (NaN divergence; last, by class index).
    ``most_shifted_layer``/``shift``: the layer whose mean α moves most (incorrect − correct).
    """
    labels = table["label"].to_numpy()
    correct = table["correct"].to_numpy(dtype=bool)
    alpha = table[[alpha_col(name) for name in layers]].to_numpy(dtype=float)
    rows = []
    for c, cname in enumerate(classes):
        ok, bad = alpha[(labels == c) & correct], alpha[(labels == c) & ~correct]
        if len(ok) and len(bad):
            p, q = ok.mean(0), bad.mean(0)
            js = js_divergence(p, q)
            diff = q - p
            top = int(np.argmax(np.abs(diff)))
            layer, shift = layers[top], float(diff[top])
        else:
            js, layer, shift = float("nan"), None, float("nan")
        rows.append(
            {
                "class": c,
                "class_name": cname,
                "n_correct": len(ok),
                "n_incorrect": len(bad),
                "js_divergence": js,
                "js_distance": math.sqrt(js) if js == js else float("nan"),
                "most_shifted_layer": layer,
                "shift": shift,
            }
        )
    df = pd.DataFrame(rows)
    df = df.sort_values(["js_divergence", "class"], ascending=[False, True], na_position="last", kind="stable")
    ranked = (df["js_divergence"] >= SHIFT_RANKED_FROM).to_numpy()  # NaN compares False
    df.insert(0, "rank", pd.array(np.where(ranked, np.cumsum(ranked), 0), dtype="Int64"))
    df.loc[~ranked, "rank"] = pd.NA
    return df.reset_index(drop=True)
