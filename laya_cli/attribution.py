"""Per-sample, per-layer attribution scores (DESIGN §2). Each returns a (B, L) tensor."""

from __future__ import annotations

from typing import Sequence

import copy

import torch
from torch import Tensor, nn

from .errors import LayaError


def laya_attention(head: nn.Module, feats: Sequence[Tensor]) -> Tensor:
    """α(x): the head's own input-conditioned layer weights."""
    with torch.no_grad():
        alpha = head(feats).alpha
    if alpha is None:
        raise LayaError("this head has no layer attention (only laya and scalarmix heads do)")
    return alpha


def contrib(head: nn.Module, feats: Sequence[Tensor], target: Tensor) -> Tensor:
    """α_i·((W z_i)_ŷ − (W z_i)_ŷ₂): layer i's additive share of the decision margin, in float64.

    ŷ = ``target``; ŷ₂ = the runner-up class (highest logit other than ŷ).
    Σ_i contrib_i = logit_ŷ − logit_ŷ₂ − (b_ŷ − b_ŷ₂).
    """
    if not hasattr(head, "layer_logits"):
        raise LayaError("contrib needs a LAYA head (logits = W Σ α_i z_i + b)")
    head64 = copy.deepcopy(head).double()
    with torch.no_grad():
        feats64 = [f.double() for f in feats]
        logits, alpha = head64(feats64)
        per_layer = head64.layer_logits(feats64)  # (B, L, C)
        masked = logits.clone()
        masked.scatter_(1, target.view(-1, 1), float("-inf"))
        runner_up = masked.argmax(-1)
        rows = torch.arange(len(target))
        margin = per_layer[rows, :, target] - per_layer[rows, :, runner_up]  # (B, L)
    return alpha * margin
