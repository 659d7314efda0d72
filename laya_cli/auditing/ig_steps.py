"""Integrated Gradients in as few steps as each sample needs (``--ig-tol``, docs/metrics.md).

IG's attributions add up to the effect they explain, Δf = p_ŷ(x) − p_ŷ(baseline), exactly only in the
limit of infinitely many steps; Captum's convergence delta δ = Σ attributions − Δf says how far off a
finite number is. Gauss–Legendre quadrature (Captum's default) converges fast on smooth paths: a head
is nearly linear along IG's path (on the benchmark's ViT-tiny head, 4 points give the completeness of
32 to within 1e-7), a network's suffix less so (at network scope on the same ViT, mean |δ|/|Δf| is 2e-2 at
4 points, 2e-4 at 8, 1e-5 at 16: float32's noise; ``python -m benchmarks.network_audit --convergence
4,8,16,32``). So every sample starts at the first steps of its
scope (``HEAD_FIRST_STEPS``, ``NETWORK_FIRST_STEPS``); the samples whose |δ| > tol·|Δf| + ``ABS_SLACK``
are attributed again with twice the steps, until they pass or reach the most steps allowed.
Gauss–Legendre points are not nested, so a refinement re-evaluates from scratch: a sample that needs
the most steps costs up to twice what fixed steps would, one that converges at once a fraction.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

HEAD_FIRST_STEPS = 4
NETWORK_FIRST_STEPS = 16
# An absolute slack (probability units) under which |δ| counts as converged whatever Δf: float32's rounding
# of a sum of attributions (measured: 1e-8 to 3e-8 at 16 steps and more), so a smaller gap is noise, not too
# few steps, and a sample whose effect is near 0 does not run to the most steps for nothing.
ABS_SLACK = 1e-7

# attribute(rows, n_steps) -> (scores of those rows (b, …), Captum's convergence delta δ (b,))
Attribute = Callable[[Tensor, int], tuple[Tensor, Tensor]]


def converged(delta: Tensor, effect: Tensor, tol: float) -> Tensor:
    """|δ| ≤ tol·|Δf| + ABS_SLACK per sample (float64 on the CPU)."""
    return delta.detach().abs().double().cpu() <= tol * effect.detach().abs().double().cpu() + ABS_SLACK


def adaptive_ig(
    attribute: Attribute, effect: Tensor, max_steps: int, tol: float, first: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Each sample's IG with the fewest steps in first·2^k (k = 0, 1, …, capped at ``max_steps``) that meets
    the tolerance: (scores (B, …), δ (B,), steps used (B,)). ``effect``: Δf per sample; ``tol`` 0: every
    sample at ``max_steps`` (one call, as plain IG)."""
    n = len(effect)
    steps_now = max_steps if tol == 0 else min(first, max_steps)
    rows = torch.arange(n)
    scores, delta = attribute(rows, steps_now)
    steps = torch.full((n,), steps_now, dtype=torch.long)
    pending = rows[~converged(delta, effect, tol)] if steps_now < max_steps else rows[:0]
    while len(pending):
        steps_now = min(2 * steps_now, max_steps)
        again, again_delta = attribute(pending, steps_now)
        on = pending.to(scores.device)
        scores[on], delta[on], steps[pending] = again.to(scores.dtype), again_delta.to(delta.dtype), steps_now
        ok = converged(again_delta, effect[pending], tol)
        pending = pending[~ok] if steps_now < max_steps else pending[:0]
    return scores, delta, steps


def steps_summary(steps: Tensor, max_steps: int, tol: float) -> dict:
    """What the JSON says of the steps IG used: mean, most, and how many (sample, layer) pairs used each count."""
    steps = steps.flatten()
    counts = {int(k): int(v) for k, v in zip(*steps.unique(return_counts=True))} if len(steps) else {}
    return {
        "tol": tol,
        "max_steps": max_steps,
        "mean": steps.double().mean().item() if len(steps) else float("nan"),
        "max": int(steps.max()) if len(steps) else 0,
        "count": {str(k): v for k, v in sorted(counts.items())},
    }
