"""Heads that read the pooled layer representations r_1..r_L and predict classes.

Every head has the same signature: ``head(feats) -> HeadOutput`` where ``feats`` is a
list of L tensors of shape (B, d_i). ``alpha`` is the (B, L) layer weighting the head
actually used (None where it has none); ``layer_logits`` is (B, L, C) with
``logits = sum_i weight_i * layer_logits_i + bias`` for heads where that decomposition
exists (used by the intrinsic ``contrib`` attribution).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import LayaError, unknown_choice


class HeadOutput(NamedTuple):
    logits: Tensor
    alpha: Tensor | None = None


@dataclass
class HeadConfig:
    d_star: int = 96
    tau: float = 1.5
    psi: str = "identity"
    score_hidden: int = 192

    def validate(self) -> "HeadConfig":
        if self.d_star <= 0:
            raise LayaError(f"--d-star must be positive, got {self.d_star}")
        if not self.tau > 0:
            raise LayaError(f"--tau must be positive, got {self.tau}")
        if self.score_hidden <= 0:
            raise LayaError(f"--score-hidden must be positive, got {self.score_hidden}")
        if self.psi not in ("identity", "mlp"):
            raise unknown_choice("--psi", self.psi, ["identity", "mlp"])
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def _adapters(dims: Sequence[int], d_star: int) -> nn.ModuleList:
    return nn.ModuleList(nn.Linear(d, d_star) for d in dims)


class LAYAHead(nn.Module):
    """Layer-wise Attention Aggregator: input-conditioned softmax attention over layers."""

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadConfig):
        super().__init__()
        L, d = len(dims), cfg.d_star
        self.tau = cfg.tau
        self.adapters = _adapters(dims, d)
        self.psi = (
            nn.Identity()
            if cfg.psi == "identity"
            else nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU())
        )
        self.scorer = nn.Sequential(nn.Linear(L * d, cfg.score_hidden), nn.GELU(), nn.Linear(cfg.score_hidden, L))
        self.classifier = nn.Linear(d, num_classes)

    def embed(self, feats: Sequence[Tensor]) -> Tensor:
        """z: (B, L, d*), the adapted layer representations."""
        return torch.stack([g(r) for g, r in zip(self.adapters, feats)], dim=1)

    def attention(self, z: Tensor) -> Tensor:
        u = self.psi(z)
        scores = self.scorer(u.flatten(1))
        return torch.softmax(scores / self.tau, dim=-1)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        z = self.embed(feats)
        alpha = self.attention(z)
        if alpha_mask is not None:  # "mask" ablation: drop layers, renormalise the rest
            alpha = alpha * alpha_mask
            alpha = alpha / alpha.sum(-1, keepdim=True).clamp_min(1e-12)
        h = (alpha.unsqueeze(-1) * z).sum(1)
        return HeadOutput(self.classifier(h), alpha)

    def layer_logits(self, feats: Sequence[Tensor]) -> Tensor:
        """(B, L, C): W z_i per layer, without bias."""
        return F.linear(self.embed(feats), self.classifier.weight)


class LastLayerHead(nn.Module):
    """The standard output layer: a linear classifier on the last tapped layer only."""

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadConfig):
        super().__init__()
        self.classifier = nn.Linear(dims[-1], num_classes)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        return HeadOutput(self.classifier(feats[-1]))


class ConcatHead(nn.Module):
    """Static concatenation of the adapted layers."""

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadConfig):
        super().__init__()
        self.adapters = _adapters(dims, cfg.d_star)
        self.classifier = nn.Linear(len(dims) * cfg.d_star, num_classes)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        z = torch.cat([g(r) for g, r in zip(self.adapters, feats)], dim=-1)
        return HeadOutput(self.classifier(z))


class ScalarMixHead(nn.Module):
    """ELMo-style scalar mix: global learned softmax weights over layers, times gamma."""

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadConfig):
        super().__init__()
        self.adapters = _adapters(dims, cfg.d_star)
        self.mix_logits = nn.Parameter(torch.zeros(len(dims)))
        self.gamma = nn.Parameter(torch.ones(()))
        self.classifier = nn.Linear(cfg.d_star, num_classes)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        z = torch.stack([g(r) for g, r in zip(self.adapters, feats)], dim=1)
        alpha = torch.softmax(self.mix_logits, dim=0).expand(z.shape[0], -1)
        if alpha_mask is not None:
            alpha = alpha * alpha_mask
            alpha = alpha / alpha.sum(-1, keepdim=True).clamp_min(1e-12)
        h = self.gamma * (alpha.unsqueeze(-1) * z).sum(1)
        return HeadOutput(self.classifier(h), alpha)


HEADS: dict[str, type[nn.Module]] = {
    "laya": LAYAHead,
    "last": LastLayerHead,
    "concat": ConcatHead,
    "scalarmix": ScalarMixHead,
}

# Heads whose alpha is a real (renormalisable) layer weighting, so "mask" ablation applies.
MASKABLE_HEADS = ("laya", "scalarmix")


def build_head(kind: str, dims: Sequence[int], num_classes: int, cfg: HeadConfig | None = None) -> nn.Module:
    if kind not in HEADS:
        raise unknown_choice("head", kind, HEADS)
    cfg = (cfg or HeadConfig()).validate()
    return HEADS[kind](list(dims), num_classes, cfg)
