"""What early stopping keeps (``laya train --stop-on``): validation accuracy, or accuracy plus the faithfulness of α.

``accuracy`` (the default) keeps the epoch with the best validation accuracy. ``combined`` keeps the epoch with
the best validation accuracy + validation faithfulness of α, equal weights: the mean Spearman ρ between α and the
head's leave-one-layer-out effects Δ (removal by mean, ŷ = the head's prediction) over the validation samples
where ρ is defined, as ``laya audit`` measures it. Accuracy alone lets an aligned head drift into attention that
is faithful on few samples (docs/results/fashion-mnist.md): the combined score sees both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..auditing.metrics import degenerate_effects, lolo_effects, spearman_rows
from ..auditing.settings import TIE_TOL
from ..runtime.device import to_device


def _feature_batches(model: nn.Module, inputs, batch_size: int, device: str):
    """The head's inputs r_1..r_L of the validation data, batch by batch (a head on features, an end-to-end
    model on images, or features read from a store)."""
    if hasattr(inputs, "batches"):
        chunks = (xs for xs, _ in inputs.batches(batch_size, 0, len(inputs)))
    else:
        n = len(inputs[0])
        chunks = ([t[s : s + batch_size] for t in inputs] for s in range(0, n, batch_size))
    for chunk in chunks:
        xs = [to_device(t, device) for t in chunk]
        yield model.features(xs) if hasattr(model, "features") else [x.float() for x in xs]


@torch.no_grad()
def validation_faithfulness(
    model: nn.Module, inputs, reference: Sequence[Tensor] | None, device: str = "cpu", batch_size: int = 1024
) -> float:
    """Mean ρ(α, Δ) over the validation samples where it is defined (NaN when it is nowhere). ``reference``: r̄
    (the training mean of the features); None: the validation features' own mean."""
    model.eval()
    head = getattr(model, "head", model)
    if reference is None:
        total, n = None, 0
        for feats in _feature_batches(model, inputs, batch_size, device):
            sums = [f.double().sum(0) for f in feats]
            total = sums if total is None else [a + b for a, b in zip(total, sums)]
            n += len(feats[0])
        reference = [(t / max(n, 1)).float() for t in total or []]
    rhos = []
    for feats in _feature_batches(model, inputs, batch_size, device):
        out = head(feats)
        target = out.logits.argmax(-1)
        delta = lolo_effects(head, feats, target, [r.to(device) for r in reference], "mean")
        a, d = out.alpha.cpu(), delta.cpu()  # ties within the audit's default noise floor, as the audit ranks them
        rho = spearman_rows(a, d, TIE_TOL).masked_fill(degenerate_effects(d, TIE_TOL), math.nan)
        rhos.append(rho)
    rho = torch.cat(rhos) if rhos else torch.zeros(0)
    defined = rho[~rho.isnan()]
    return defined.mean().item() if len(defined) else math.nan


def stopping_score(val_accuracy: float, val_faithfulness: float | None) -> float:
    """What early stopping maximises: the accuracy, plus the faithfulness with ``--stop-on combined`` (an
    undefined faithfulness counts as 0)."""
    if val_faithfulness is None:
        return val_accuracy
    return val_accuracy + (0.0 if math.isnan(val_faithfulness) else val_faithfulness)
