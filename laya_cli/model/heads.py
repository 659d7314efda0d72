"""Heads that read the pooled layer representations r_1..r_L and predict classes.

Every head is a ``Head``: ``head(feats) -> HeadOutput`` where ``feats`` is a list of L tensors of
shape (B, d_i) (a LAYA head with ``--alpha-reader positions``: each r_i packed with its tap's
positions, ``backbones.pooling.pack_positions``, which only its α reads). ``alpha`` is the (B, L)
layer weighting the head actually used (None where it has none). Its class attributes say what it
can do, so callers read flags and never test types.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..backbones.pooling import unpack_positions
from ..runtime.errors import LayaError, match_choice
from ..runtime.fileio import digest
from .settings import HeadSettings, check_alpha_reader


class HeadOutput(NamedTuple):
    logits: Tensor
    alpha: Tensor | None = None


class Head(nn.Module):
    """What every head is, and the capability flags its callers read.

    ``kind``              its name in ``HEADS`` (``--head``) and in checkpoints;
    ``has_alpha``         it returns a layer weighting α (``laya``, ``global`` attributions apply);
    ``maskable``          ``head(feats, alpha_mask=m)`` drops layers and renormalises α (``--ablation mask``);
    ``has_layer_logits``  ``head.layer_logits(feats)`` is (B, L, C) with
                          ``logits = Σ_i α_i · layer_logits_i + bias`` (the intrinsic ``contrib``);
    ``cascade``           its parameter groups (attribute names) from the output down to the
                          adapters: the order of the model-randomisation sanity check
                          (``randomised_copy``, docs/metrics.md).
    """

    kind: ClassVar[str]
    has_alpha: ClassVar[bool] = False
    maskable: ClassVar[bool] = False
    has_layer_logits: ClassVar[bool] = False
    cascade: ClassVar[tuple[str, ...]] = ("classifier",)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        raise NotImplementedError

    def layer_logits(self, feats: Sequence[Tensor]) -> Tensor:
        raise NotImplementedError(f"the {self.kind} head has no additive per-layer logits")


def _adapters(dims: Sequence[int], d_star: int) -> nn.ModuleList:
    return nn.ModuleList(nn.Linear(d, d_star) for d in dims)


def read_layers(feats: Sequence[Tensor], layer_norm: bool) -> list[Tensor]:
    """r_1..r_L as a head reads them: as given, or each normalised over its features (``--layer-norm``: LayerNorm
    without affine parameters, so the adapter after it is the only scale and shift and the head's weights are
    unchanged). Pretrained transformers' later layers are larger and more separable; normalising each r_i gives
    every layer the same scale before the adapters."""
    if not layer_norm:
        return list(feats)
    return [F.layer_norm(r, r.shape[-1:]) for r in feats]


def _masked(alpha: Tensor, alpha_mask: Tensor | None) -> Tensor:
    """The "mask" ablation: α with the masked layers dropped and the rest renormalised."""
    if alpha_mask is None:
        return alpha
    alpha = alpha * alpha_mask
    return alpha / alpha.sum(-1, keepdim=True).clamp_min(1e-12)


class PositionReader(nn.Module):
    """α's own look at each layer's positions (``--alpha-reader positions``): one learned query per layer attends
    over the tap's positions, keys and values a linear map of each position to d*, padding masked; one more vector
    u_i per layer for the scorer. The prediction never reads it."""

    def __init__(self, dims: Sequence[int], d_star: int):
        super().__init__()
        self.keys = _adapters(dims, d_star)
        self.query = nn.Parameter(torch.randn(len(dims), d_star) / math.sqrt(d_star))

    def forward(self, positions: Sequence[tuple[Tensor, Tensor]], layer_norm: bool) -> Tensor:
        """(B, L, d*) from each layer's (valid (B, P), positions (B, P, d_i)).

        The keys K = W p + b are never formed: q·(W p + b) = (Wᵀq)·p + q·b, whose constant q·b the softmax drops,
        and Σ a_p (W p + b) = W (Σ a_p p) + b as the weights sum to 1; so a layer costs P·d_i, not P·d_i·d*."""
        out = []
        for key, query, (valid, pos) in zip(self.keys, self.query, positions):
            p = F.layer_norm(pos, pos.shape[-1:]) if layer_norm else pos
            logits = (p @ (key.weight.t() @ query)) / math.sqrt(len(query))
            # a row with no valid position (never from laya's own taps) reads the key map's bias, not NaN
            weights = torch.softmax(logits.masked_fill(valid <= 0, float("-inf")), dim=-1).nan_to_num(0.0)
            out.append(key((weights.unsqueeze(-1) * p).sum(1)))
        return torch.stack(out, dim=1)


class LAYAHead(Head):
    """Layer-wise Attention Aggregator: input-conditioned softmax attention over layers."""

    kind, has_alpha, maskable, has_layer_logits = "laya", True, True, True
    cascade = ("classifier", "scorer", "reader", "psi", "adapters")

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadSettings):
        super().__init__()
        L, d = len(dims), cfg.d_star
        self.tau, self.layer_norm, self.dims = cfg.tau, cfg.layer_norm, list(dims)
        self.reads_positions = cfg.alpha_reader == "positions"
        # a pooled reader holds no parameters: its checkpoints' weights are what they always were
        self.reader = PositionReader(dims, d) if self.reads_positions else nn.Identity()
        self.adapters = _adapters(dims, d)
        self.psi = (
            nn.Identity()
            if cfg.psi == "identity"
            else nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU())
        )
        width = (2 if self.reads_positions else 1) * L * d  # ψ(z), and u from the positions
        self.scorer = nn.Sequential(nn.Linear(width, cfg.score_hidden), nn.GELU(), nn.Linear(cfg.score_hidden, L))
        self.classifier = nn.Linear(d, num_classes)

    def pooled(self, feats: Sequence[Tensor]) -> list[Tensor]:
        """r_1..r_L: the features as given, or (positions reader) the pooled part of each packed row."""
        if not self.reads_positions:
            return list(feats)
        return [unpack_positions(f, d)[0] for f, d in zip(feats, self.dims)]

    def embed(self, feats: Sequence[Tensor]) -> Tensor:
        """z: (B, L, d*), the adapted layer representations."""
        pooled = read_layers(self.pooled(feats), self.layer_norm)
        return torch.stack([g(r) for g, r in zip(self.adapters, pooled)], dim=1)

    def scores(self, z: Tensor, feats: Sequence[Tensor] | None = None) -> Tensor:
        """s / τ: (B, L), the attention's logits; ``feats`` (the rows z came from) for the positions reader."""
        read = self.psi(z).flatten(1)
        if self.reads_positions:
            if feats is None:
                raise LayaError("this head's α reads each layer's positions: give it the features z came from")
            parts = [unpack_positions(f, d)[1:] for f, d in zip(feats, self.dims)]
            read = torch.cat([read, self.reader(parts, self.layer_norm).flatten(1)], dim=-1)
        return self.scorer(read) / self.tau

    def attention(self, z: Tensor, feats: Sequence[Tensor] | None = None) -> Tensor:
        return torch.softmax(self.scores(z, feats), dim=-1)

    def log_attention(self, z: Tensor, feats: Sequence[Tensor] | None = None) -> Tensor:
        """log α, computed stably (a layer whose α underflows to 0 keeps a finite log and gradient)."""
        return torch.log_softmax(self.scores(z, feats), dim=-1)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        z = self.embed(feats)
        alpha = _masked(self.attention(z, feats), alpha_mask)
        h = (alpha.unsqueeze(-1) * z).sum(1)
        return HeadOutput(self.classifier(h), alpha)

    def layer_logits(self, feats: Sequence[Tensor]) -> Tensor:
        """(B, L, C): W z_i per layer, without bias."""
        return F.linear(self.embed(feats), self.classifier.weight)


class LastLayerHead(Head):
    """The standard output layer: a linear classifier on the last tapped layer only."""

    kind = "last"

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadSettings):
        super().__init__()
        self.layer_norm = cfg.layer_norm
        self.classifier = nn.Linear(dims[-1], num_classes)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        return HeadOutput(self.classifier(read_layers(feats[-1:], self.layer_norm)[0]))


class ConcatHead(Head):
    """Static concatenation of the adapted layers."""

    kind = "concat"
    cascade = ("classifier", "adapters")

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadSettings):
        super().__init__()
        self.layer_norm = cfg.layer_norm
        self.adapters = _adapters(dims, cfg.d_star)
        self.classifier = nn.Linear(len(dims) * cfg.d_star, num_classes)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        z = torch.cat([g(r) for g, r in zip(self.adapters, read_layers(feats, self.layer_norm))], dim=-1)
        return HeadOutput(self.classifier(z))


class ScalarMixHead(Head):
    """ELMo-style scalar mix: global learned softmax weights over layers, times gamma."""

    kind, has_alpha, maskable = "scalarmix", True, True
    cascade = ("classifier", "gamma", "mix_logits", "adapters")

    def __init__(self, dims: Sequence[int], num_classes: int, cfg: HeadSettings):
        super().__init__()
        self.layer_norm = cfg.layer_norm
        self.adapters = _adapters(dims, cfg.d_star)
        self.mix_logits = nn.Parameter(torch.zeros(len(dims)))
        self.gamma = nn.Parameter(torch.ones(()))
        self.classifier = nn.Linear(cfg.d_star, num_classes)

    def forward(self, feats: Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        z = torch.stack([g(r) for g, r in zip(self.adapters, read_layers(feats, self.layer_norm))], dim=1)
        alpha = _masked(torch.softmax(self.mix_logits, dim=0).expand(z.shape[0], -1), alpha_mask)
        h = self.gamma * (alpha.unsqueeze(-1) * z).sum(1)
        return HeadOutput(self.classifier(h), alpha)


HEADS: dict[str, type[Head]] = {cls.kind: cls for cls in (LAYAHead, LastLayerHead, ConcatHead, ScalarMixHead)}

# Heads whose alpha is a real (renormalisable) layer weighting, so the "mask" removal applies.
MASKABLE_HEADS = tuple(k for k, cls in HEADS.items() if cls.maskable)


def head_kind(head: nn.Module) -> str:
    return getattr(head, "kind", type(head).__name__)


def build_head(kind: str, dims: Sequence[int], num_classes: int, cfg: HeadSettings | None = None) -> Head:
    kind = match_choice("head", kind, HEADS)
    cfg = (cfg or HeadSettings()).validate()
    check_alpha_reader(cfg.alpha_reader, kind)
    return HEADS[kind](list(dims), num_classes, cfg)


# --------------------------------------------------------------------------- model randomisation


def cascade_stages(head: nn.Module) -> list[str]:
    """The head's parameter groups that hold parameters, from the output down (``cascade``).

    Groups without parameters (ψ = identity) are skipped. A head without ``cascade`` falls
    back to its direct children and parameters in reverse registration order.
    """
    names = getattr(head, "cascade", None)
    if names is None:
        names = [n for n, _ in head.named_parameters(recurse=False)] + [n for n, _ in head.named_children()]
        names = names[::-1]
    out = []
    for name in names:
        part = getattr(head, name)
        if isinstance(part, nn.Parameter) or any(True for _ in part.parameters()):
            out.append(name)
    return out


@torch.no_grad()
def randomised_copy(head: nn.Module, stages: int, seed: int = 0) -> nn.Module:
    """A copy of ``head`` with its first ``stages`` cascade groups re-initialised; ``head`` is untouched.

    Cascading randomisation (Adebayo et al., 2018): stage 1 re-initialises the classifier,
    stage 2 also the next group down, … the last stage every group down to the adapters.
    Modules get their own default initialisation (``reset_parameters``: PyTorch's for
    ``nn.Linear``); bare parameters (ScalarMix's ``mix_logits``, ``gamma``, whose constructor
    values are constants) are drawn from N(0, 1). Each group's draws depend only on ``seed``
    and the group's name, so a group is re-initialised the same way at every stage, on every
    device, and the global random state is left as it was.
    """
    device = next(head.parameters()).device
    out = copy.deepcopy(head).cpu()
    for name in cascade_stages(head)[:stages]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(digest(seed=seed, group=name), 16) % (2**63))
            part = getattr(out, name)
            if isinstance(part, nn.Parameter):
                nn.init.normal_(part)
            else:
                for module in part.modules():
                    if hasattr(module, "reset_parameters"):
                        module.reset_parameters()
    return out.to(device).eval()
