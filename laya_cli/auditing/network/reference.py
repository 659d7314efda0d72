"""What a patched tap takes at network scope besides the batch's own inputs: the training mean of each tap's
unpooled activation (or of its update), from the checkpoint or computed once over the training split and cached."""

from __future__ import annotations

import torch
from torch import Tensor

from ...features.extraction import tap_means
from ...runtime.errors import LayaError
from ...runtime.progress import log


def network_reference(model, removal: str = "mean", device: str = "cpu", use_cache: bool = True) -> list[Tensor] | None:
    """What a patched layer is replaced by, besides the batch's own inputs: ``None`` for ``zero`` and ``bypass``
    (tap i's output := its input); for ``mean`` the training mean of each tap's unpooled activation — from the
    checkpoint (``tap_reference``), else computed once over the checkpoint's training split and cached beside
    the features (keyed like them); for ``mean-update`` the training mean of each block's update (output − input),
    computed and cached the same way. ``removal``: the network scope's (``Removal.network``: trusted)."""
    if removal in ("zero", "bypass"):
        return None
    stored = model.checkpoint.get("tap_reference") if removal == "mean" else None
    if stored is not None:
        return [t.float() for t in stored]
    return _training_means(model, removal, device, use_cache)


def _training_means(model, ablation: str, device: str, use_cache: bool) -> list[Tensor]:
    """``tap_means`` of the outputs (``mean``) or of the updates (``mean-update``) over the training split, cached."""
    from ...data.datasets import USER_DATASET
    from ...features.cache import FeatureCache, feature_key
    from ...features.extraction import LayerFeatures, tap_outputs, tap_updates
    from ...model.evaldata import model_dataset
    from ...runtime.distributed import is_main
    from ...runtime.fileio import digest

    what = "tap means" if ablation == "mean" else "mean updates"
    if model.checkpoint.get("dataset", {}).get("name") == USER_DATASET:
        raise LayaError(
            f"this model stores no {what} and was trained from your own DataLoader, which laya cannot reload to "
            'compute them: audit the network scope with --ablation zero or bypass (ablation="bypass")'
        )
    req, data = model_dataset(model)
    train = data.train
    model.backbone.to(device)
    cache = FeatureCache() if use_cache else None
    key = digest(
        features=feature_key(model.backbone, data.identity, "train", req.seed, len(train), device),
        what="tap-means" if ablation == "mean" else "tap-update-means",
    )
    if cache is not None:
        hit = cache.load(key)
        if hit is not None and len(hit.feats) == len(model.layer_names):
            log(f"reusing cached {what} ({cache.path(key)})")
            return [f[0] for f in hit.feats]
    why = "the checkpoint stores no tap means (older laya, or a frozen backbone)" if ablation == "mean" else what
    log(f"{why}: computing them over {len(train):,} training samples once")
    of = tap_outputs if ablation == "mean" else tap_updates
    means = tap_means(model.backbone, train.images, device=device, description=f"{what} (train)", of=of)
    if cache is not None and is_main():  # one row per layer, stored as a feature entry
        cache.save(key, LayerFeatures([m.unsqueeze(0) for m in means], torch.zeros(1, dtype=torch.long)))
    return means
