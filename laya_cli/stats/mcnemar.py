"""McNemar's exact test of a change of accuracy between two models on the same samples (``laya diff``).

Only the discordant samples count: ``b`` right under A and wrong under B, ``c`` the reverse. Under the null
hypothesis of equal accuracy, b ~ Binomial(b + c, ½); the two-sided p-value is min(1, 2 · P(X ≤ min(b, c))),
as ``statsmodels.stats.contingency_tables.mcnemar(exact=True)`` and ``scipy.stats.binomtest`` compute it.
Exact in integers (no normal approximation), so it holds for few discordant samples too.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np


@dataclass(frozen=True)
class McNemar:
    a_only: int  # right under A, wrong under B
    b_only: int  # wrong under A, right under B
    p_value: float


def mcnemar_exact(b: int, c: int) -> float:
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def mcnemar(correct_a, correct_b) -> McNemar:
    """The test on two boolean vectors (is each sample classified right by A, by B)."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    return McNemar(a_only, b_only, mcnemar_exact(a_only, b_only))
