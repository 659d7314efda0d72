"""Dropping interior layers: the model run with some blocks bypassed (each one's output := its input, as
layer-pruning studies remove a block), and the orders that choose which to drop first.

Orders, least important first: LAYA's mean α (``alpha``), Block Influence 1 − cos(input, output) averaged over the
real tokens (``block-influence``, ShortGPT), the mean |bypass effect| on p_ŷ at network scope (``network``), the
deepest droppable layer first (``reverse``: reported to beat Block Influence in recent pruning studies), a greedy
oracle that drops, one at a time, the layer whose removal keeps validation accuracy highest (``greedy``), and seeded
random orders. Every order is chosen on one split (validation) and scored on another (test). The last tap, the
representation the head was trained to rely on most directly, is never dropped, nor a layer dropped already.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..auditing.network.patching import NetworkScope
from ..data.images import image_batches
from ..features.extraction import to_float_images
from ..runtime.device import to_device
from ..stats.proportion import wilson

SCORED = ("alpha", "block-influence", "network")  # the orders read off one score per layer


def dropped_predictions(model, images, drop: Sequence[int], batch_size: int = 64, device: str = "cpu") -> Tensor:
    """The head's predictions with the taps in ``drop`` bypassed inside the backbone: (n,)."""
    return predictions(model.backbone, model.head, images, drop, batch_size, device)


@torch.no_grad()
def predictions(backbone, head, images, drop: Sequence[int] = (), batch_size: int = 64, device: str = "cpu") -> Tensor:
    """``head``'s predictions on ``backbone``'s taps, the taps in ``drop`` bypassed: (n,)."""
    backbone, head = backbone.eval().to(device), head.eval().to(device)
    preds = []
    for xb in image_batches(images, batch_size):
        hs = backbone.bypassed_activations(to_float_images(to_device(xb, device)), drop)
        preds.append(head([backbone.pool_tap(i, h) for i, h in enumerate(hs)]).logits.argmax(-1).cpu())
    return torch.cat(preds)


def _block_influence(h: Tensor, given: Tensor, mask: Tensor | None) -> Tensor:
    """(B,) 1 − cos(input, output) per position over the last dimension, averaged over the real positions."""
    cos = torch.nn.functional.cosine_similarity(h.float(), given.float(), dim=-1)
    if cos.ndim == 1:
        return 1 - cos
    weight = torch.ones_like(cos) if mask is None else mask.to(cos)
    return 1 - (cos * weight).flatten(1).sum(1) / weight.flatten(1).sum(1).clamp_min(1)


@torch.no_grad()
def layer_scores(model, images, batch_size: int = 64, device: str = "cpu") -> dict[str, Tensor]:
    """Per layer, over ``images``: mean α, mean Block Influence, mean |bypass effect| on p_ŷ. (L,) each."""
    backbone, head = model.backbone.eval().to(device), model.head.eval().to(device)
    scope = NetworkScope(backbone, head, None, ablation="bypass")
    sums = {k: 0.0 for k in SCORED}
    for xb in image_batches(images, batch_size):
        x = to_float_images(to_device(xb, device))
        hs = scope.activations(x)
        feats = scope.pooled(hs)
        out = head(feats)
        target = out.logits.argmax(-1)
        influence = [_block_influence(h, g, backbone.adapter.batch_mask(h)) for h, g in zip(hs, scope.inputs)]
        if out.alpha is not None:  # a head without α (last, concat): no alpha order
            sums["alpha"] += out.alpha.double().sum(0)
        sums["block-influence"] += torch.stack(influence, dim=1).double().sum(0)
        sums["network"] += scope.effects(x, hs, feats, target).abs().double().sum(0)
    return {k: (v / len(images)).cpu() for k, v in sums.items() if isinstance(v, Tensor)}


def greedy_order(model, images, labels: Tensor, candidates: Sequence[int], k: int, **run) -> list[int]:
    """Drop, one at a time, the candidate whose removal (with those already dropped) keeps accuracy highest."""
    order: list[int] = []
    for _ in range(k):
        left = [i for i in candidates if i not in order]
        accuracy = {i: (dropped_predictions(model, images, [*order, i], **run) == labels).double().mean() for i in left}
        order.append(max(left, key=lambda i: (accuracy[i], -i)))
    return order


def droppable(model) -> list[int]:
    """The taps that may go: all but the last, less those dropped already (a checkpoint written by --drop)."""
    gone = set(getattr(model.spec, "dropped", None) or [])
    return [i for i in range(len(model.backbone.layer_names) - 1) if i not in gone]


def drop_table(model, val, test, k: int, draws: int = 3, seed: int = 0, **run) -> dict:
    """Test accuracy (with its Wilson 95 % interval) after dropping 0..k layers in each order chosen on ``val``.
    ``val``/``test``: (images, labels)."""
    candidates = droppable(model)
    k = min(k, len(candidates))
    scores = layer_scores(model, val[0], **run)
    orders = {name: sorted(candidates, key=lambda i: (float(scores[name][i]), i)) for name in scores}
    orders["reverse"] = sorted(candidates, reverse=True)
    orders["greedy"] = greedy_order(model, val[0], val[1], candidates, k, **run)
    g = torch.Generator().manual_seed(seed)
    randoms = [[candidates[i] for i in torch.randperm(len(candidates), generator=g).tolist()] for _ in range(draws)]
    labels, correct_by_set = test[1], {}  # orders share drop sets (k = 0 always, often the first layers): one pass each
    rows = []
    for name, order in [*orders.items(), *((f"random {d + 1}", o) for d, o in enumerate(randoms))]:
        for j in range(k + 1):
            key = frozenset(order[:j])
            if key not in correct_by_set:
                correct_by_set[key] = int((dropped_predictions(model, test[0], order[:j], **run) == labels).sum())
            correct = correct_by_set[key]
            ci = wilson(correct, len(labels))
            rows.append({"order": name, "k": j, "dropped": order[:j], "accuracy": correct / len(labels),
                         "ci_low": ci.low, "ci_high": ci.high})  # fmt: skip
    return {"layers": list(model.backbone.layer_names), "scores": {k: v.tolist() for k, v in scores.items()},
            "orders": {**orders, **{f"random {d + 1}": o for d, o in enumerate(randoms)}}, "rows": rows}  # fmt: skip
