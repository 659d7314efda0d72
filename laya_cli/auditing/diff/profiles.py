"""The per-sample numbers ``laya diff`` compares, for one model on its evaluation data: the label, the predicted
class, α (heads with layer weights), the LOLO effects Δ of the predicted class (at head scope, or patched inside
the network: ``network_deltas``), and contrib (LAYA heads)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...data.images import image_batches
from ...features.extraction import feature_batches, to_float_images
from ...runtime.device import to_device
from ..methods import contrib, laya_attention
from ..metrics import lolo_effects
from ..network.patching import NetworkScope
from ..network.reference import network_reference
from ..plan import References


@dataclass
class Profiles:
    """(n,) labels and predictions; (n, L) α, Δ and contrib (None where the head has no such thing)."""

    label: np.ndarray
    pred: np.ndarray
    delta: np.ndarray
    alpha: np.ndarray | None
    contrib: np.ndarray | None


def _cat(parts: list) -> np.ndarray | None:
    return None if not parts or parts[0] is None else torch.cat(parts).double().numpy()


@torch.no_grad()
def model_profiles(model, features, ablation: str = "mean", batch_size: int = 256, device: str = "cpu") -> Profiles:
    """Every per-sample number of ``model`` (a LayaModel) on ``features`` (its EvalData's features), in batches.
    ``ablation``: the head scope's removal (``Removal.head``)."""
    head = model.head.eval().to(device)
    removal = References.of(model, ablation, device).removal
    has_alpha, has_contrib = getattr(head, "has_alpha", False), getattr(head, "has_layer_logits", False)
    parts: dict[str, list] = {k: [] for k in ("label", "pred", "delta", "alpha", "contrib")}
    for xs, y in feature_batches(features, batch_size):
        x = [t.to(device).float() for t in xs]
        pred = head(x).logits.argmax(-1)
        parts["label"].append(y.cpu())
        parts["pred"].append(pred.cpu())
        parts["delta"].append(lolo_effects(head, x, pred, removal, ablation).cpu())
        parts["alpha"].append(laya_attention(head, x).cpu() if has_alpha else None)
        parts["contrib"].append(contrib(head, x, pred).cpu() if has_contrib else None)
    return Profiles(
        label=torch.cat(parts["label"]).numpy(),
        pred=torch.cat(parts["pred"]).numpy(),
        delta=_cat(parts["delta"]),
        alpha=_cat(parts["alpha"]),
        contrib=_cat(parts["contrib"]),
    )


@torch.no_grad()
def network_deltas(model, images, ablation: str = "mean", batch_size: int = 256, device: str = "cpu", use_cache=True):
    """(n, L) total effects Δ_i of the predicted class: tap i patched to its reference inside the network, every
    later layer recomputed (the network scope of ``laya audit``, docs/metrics.md)."""
    reference = network_reference(model, ablation, device, use_cache)
    net = NetworkScope(model.backbone.eval().to(device), model.head.eval().to(device), reference, ablation=ablation)
    parts = []
    for xb in image_batches(images, batch_size):
        x = to_float_images(to_device(xb, device))
        hs = net.activations(x)
        feats = net.pooled(hs)
        parts.append(net.effects(x, hs, feats, net.head(feats).logits.argmax(-1)).cpu())
    return torch.cat(parts).double().numpy()
