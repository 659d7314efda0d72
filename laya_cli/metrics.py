"""Metrics as pure functions of tensors."""

from __future__ import annotations

import torch
from torch import Tensor


def accuracy(pred: Tensor, target: Tensor) -> float:
    return (pred == target).float().mean().item() if len(target) else float("nan")


def macro_f1(pred: Tensor, target: Tensor, num_classes: int) -> float:
    """Unweighted mean of per-class F1 over the classes present in target or pred."""
    f1s = []
    for c in range(num_classes):
        tp = ((pred == c) & (target == c)).sum().item()
        fp = ((pred == c) & (target != c)).sum().item()
        fn = ((pred != c) & (target == c)).sum().item()
        if tp + fp + fn == 0:
            continue
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s) if f1s else float("nan")
