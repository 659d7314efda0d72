"""Early exit from per-depth predictions: policies, threshold sweeps, operating points, the oracle.

Pure functions on (N, L) tables: ``preds[n, k]`` is sample n's prediction from the layers ≤ k+1
(column L-1 is the full model), ``scores[n, k]`` the confidence a policy reads at that depth, and
``cost[k]`` the compute of running the backbone up to tap k+1 (a fraction of the full model).

A policy with threshold t stops sample n at the first depth whose score is **above** t, and at
the last depth (the full model) when none is; t = 1 therefore never stops early. Definitions and
how to read them: docs/depth.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from ..auditing.metrics import accuracy, macro_f1


def exit_depth(scores: Tensor, threshold: float) -> Tensor:
    """(N,) 0-based depth at which each sample stops: the first k with score > t, else L-1."""
    above = scores > threshold
    above[:, -1] = True
    return above.float().argmax(dim=1)


def minimal_sufficient_depth(preds: Tensor) -> Tensor:
    """(N,) the oracle: the smallest 0-based k whose prediction equals the full model's (column L-1)."""
    same = preds == preds[:, -1:]
    return same.float().argmax(dim=1)


def take_depth(table: Tensor, depth: Tensor) -> Tensor:
    """(N,) table[n, depth[n]]."""
    return table.gather(1, depth.long().unsqueeze(1)).squeeze(1)


def depth_histogram(depth: Tensor, n_layers: int) -> list[int]:
    """How many samples stop at each depth k = 1..L."""
    return torch.bincount(depth.long(), minlength=n_layers).tolist()


@dataclass
class ExitPoint:
    policy: str
    threshold: float
    accuracy: float
    macro_f1: float
    delta: float  # accuracy − the full model's
    mean_depth: float  # mean exit depth, 1-based
    flops_fraction: float  # mean backbone FLOPs as a fraction of the full model
    time_fraction: float | None  # mean backbone wall time as a fraction of the full model
    exits: list[int]  # samples stopping at each depth 1..L

    def to_dict(self) -> dict:
        return asdict(self)


def sweep(
    policy: str,
    preds: Tensor,
    scores: Tensor,
    labels: Tensor,
    thresholds: Sequence[float],
    flops_fraction: Sequence[float],
    time_fraction: Sequence[float] | None,
    num_classes: int,
) -> list[ExitPoint]:
    """One operating point per threshold: accuracy and mean compute of the policy."""
    full = accuracy(preds[:, -1], labels)
    flops = torch.tensor(list(flops_fraction), dtype=torch.float64)
    secs = torch.tensor(list(time_fraction), dtype=torch.float64) if time_fraction is not None else None
    out = []
    for t in thresholds:
        depth = exit_depth(scores, t)
        pred = take_depth(preds, depth)
        acc = accuracy(pred, labels)
        out.append(
            ExitPoint(
                policy,
                float(t),
                acc,
                macro_f1(pred, labels, num_classes),
                acc - full,
                float(depth.double().mean() + 1),
                float(flops[depth].mean()),
                float(secs[depth].mean()) if secs is not None else None,
                depth_histogram(depth, preds.shape[1]),
            )
        )
    return out


def cheapest_within(points: Sequence[ExitPoint], full_accuracy: float, tolerance: float) -> ExitPoint | None:
    """The point with the least mean FLOPs whose accuracy is at least full − tolerance (ties: the more
    accurate); None when no point qualifies."""
    ok = [p for p in points if p.accuracy >= full_accuracy - tolerance - 1e-12]
    if not ok:
        return None
    return min(ok, key=lambda p: (p.flops_fraction, -p.accuracy))
