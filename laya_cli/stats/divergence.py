"""The Jensen–Shannon divergence between distributions over layers (base 2: in [0, 1]), vectorised over rows."""

from __future__ import annotations

import numpy as np


def normalised(p: np.ndarray) -> np.ndarray:
    """Each row scaled to sum to 1 (a row of zeros stays zeros)."""
    p = np.asarray(p, dtype=np.float64)
    total = p.sum(-1, keepdims=True)
    return np.divide(p, total, out=np.zeros_like(p), where=total > 0)


def _kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(p / q), 0.0)
    return terms.sum(-1)


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """JS(p ‖ q) = ½ KL(p ‖ m) + ½ KL(q ‖ m), m = ½ (p + q), in bits, along the last axis (rows normalised
    first). ``scipy.spatial.distance.jensenshannon(p, q, base=2)`` is its square root."""
    p, q = normalised(p), normalised(q)
    m = (p + q) / 2
    return np.clip(0.5 * _kl(p, m) + 0.5 * _kl(q, m), 0.0, 1.0)
