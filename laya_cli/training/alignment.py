"""Faithfulness-aligned training (``laya train --align λ``): teach α to rank the layers the way
removing them actually moves the prediction.

    loss = cross_entropy(logits, y) + λ · ranking_loss(log α(x), Δ(x))

Δ_i(x) = p_ŷ(x) − p_ŷ(x with r_i := r̄_i) are the head's own leave-one-layer-out effects under
removal by mean (``metrics.lolo_effects``: what the audit ranks α against), computed without
gradient as a target; ŷ is the head's prediction. The ranking loss is RankNet's pairwise
logistic loss over the layer pairs whose effects differ:

    ℓ = mean over samples b and pairs i < j with Δ_bi ≠ Δ_bj of
        softplus(−sgn(Δ_bi − Δ_bj) · (log α_bi − log α_bj))

log α_i − log α_j = (s_i − s_j)/τ only sees score differences, so the term can reorder the small
weights of the layers α hardly uses without pulling the large one. By default (``--align-scope
scorer``) α for this term is recomputed from the detached adapted layers z = g(r): only the
scorer (and ψ) learn from it, so it cannot trade classification accuracy for agreement through
the adapters, the classifier or the backbone. ``--align-scope head`` lets its gradient reach the
adapters too (the whole α path of the head; the backbone's features stay detached). Why these
choices (and what else was tried): docs/metrics.md#aligned-training.
λ = 0 skips the term entirely: exactly the plain training.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..auditing.metrics import lolo_effects
from ..runtime import distributed
from ..runtime.errors import LayaError

EMA_MOMENTUM = 0.95  # r̄ during end-to-end training: the backbone moves, so a running mean


def ranking_loss(log_alpha: Tensor, delta: Tensor, data_parallel: bool = False, sharpness: float = 1.0) -> Tensor:
    """Pairwise logistic (RankNet) loss of ``log_alpha`` (B, L) against the order of ``delta`` (B, L).

    ``sharpness`` κ (``--align-sharpness``): each pair's softplus reads κ·(log α_i − log α_j), so a pair counts as
    ordered once its gap passes about 1/κ nats. At κ = 1 the loss keeps asking for gaps of several nats between
    every two layers: a steep α the classification pulls back against, and the two settle on a noisy order.
    Tied effects make no pair; with no pair at all the loss is 0. ``data_parallel`` (torchrun, each rank holding its
    share of one global batch): the pairs are counted over all the ranks and the rank's sum is scaled by the world
    size, so DDP's average of the ranks' gradients is the gradient of the global batch's term (every rank must call).
    """
    log_alpha = log_alpha if sharpness == 1 else sharpness * log_alpha
    i, j = torch.triu_indices(log_alpha.shape[1], log_alpha.shape[1], 1, device=log_alpha.device)
    sign = torch.sign(delta[:, i] - delta[:, j])
    per_pair = F.softplus(-sign * (log_alpha[:, i] - log_alpha[:, j]))
    pairs = sign.abs()
    if not data_parallel:
        return (per_pair * pairs).sum() / pairs.sum().clamp_min(1.0)
    count = distributed.all_sum_(pairs.sum().detach().reshape(1))[0]
    return (per_pair * pairs).sum() * distributed.world_size() / count.clamp_min(1.0)


DISTILL_T = 0.1  # the distillation target's temperature: effects 0.1 of p_ŷ apart weigh e to 1


def distillation_loss(log_alpha: Tensor, delta: Tensor, data_parallel: bool = False) -> Tensor:
    """Cross-entropy of α against softmax(Δ / ``DISTILL_T``) per sample, averaged over the samples: α fitted to
    the effects' sizes, not only their order. ``data_parallel``: the mean over every rank's rows (as
    ``ranking_loss``)."""
    target = torch.softmax(delta.float() / DISTILL_T, -1)
    per_row = -(target * log_alpha).sum(-1)
    if not data_parallel:
        return per_row.mean() if len(per_row) else per_row.sum()
    count = distributed.all_sum_(per_row.new_full((1,), len(per_row)).detach())[0]
    return per_row.sum() * distributed.world_size() / count.clamp_min(1.0)


def fitting_loss(
    log_alpha: Tensor, delta: Tensor, loss: str = "rank", data_parallel: bool = False, sharpness: float = 1.0
) -> Tensor:
    """``--align-loss``: ``rank`` (``ranking_loss``, at ``sharpness``), ``distill`` (``distillation_loss``) or
    ``both`` (their sum)."""
    if loss == "distill":
        return distillation_loss(log_alpha, delta, data_parallel)
    ranked = ranking_loss(log_alpha, delta, data_parallel, sharpness)
    return ranked if loss == "rank" else ranked + distillation_loss(log_alpha, delta, data_parallel)


def batch_means(feats: Sequence[Tensor], data_parallel: bool = False) -> list[Tensor]:
    """Each layer's mean over the batch's rows, detached; ``data_parallel``: over the rows of every rank's share
    (one all-reduce of the sums and the count), so every rank holds the same means (a rank may hold no row)."""
    if not data_parallel:
        return [f.detach().mean(0) for f in feats]
    flat = torch.cat([f.detach().sum(0).flatten() for f in feats] + [feats[0].new_full((1,), len(feats[0]))])
    flat = distributed.all_sum_(flat)
    sums, count = flat[:-1].split([f.shape[1:].numel() for f in feats]), flat[-1]
    return [s.view(f.shape[1:]) / count for s, f in zip(sums, feats)]


def alignment_loss(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    reference: Sequence[Tensor] | None,
    scope: str = "scorer",
    delta: Tensor | None = None,
    data_parallel: bool = False,
    loss: str = "rank",
    sharpness: float = 1.0,
) -> Tensor:
    """The λ-free alignment term of a LAYA head on one batch: a scalar whose gradient reaches the scorer and ψ
    (``scope`` "scorer") or also the adapters (``scope`` "head"). ``feats``: r_1..r_L as the head reads them;
    ``target``: ŷ; ``reference``: r̄. ``delta``: the (B, L) effects to rank α as (default: the head's own
    leave-one-layer-out effects under r̄; the network target's: ``network_target.py``). ``data_parallel``: the
    batch is this rank's share of a global one (``ranking_loss``). ``loss``, ``sharpness``: how α is fitted
    (``fitting_loss``)."""
    feats = [f.detach() for f in feats]
    if delta is None:
        with torch.no_grad():
            delta = lolo_effects(head, feats, target, reference, "mean")
    with torch.set_grad_enabled(scope == "head"):
        z = head.embed(feats)
    alpha = head.attention(z, feats)
    return fitting_loss(torch.log(alpha.clamp_min(1e-12)), delta, loss, data_parallel, sharpness)


class Alignment:
    """The training term ``weight · alignment_loss`` with its reference r̄: the training mean of the
    features when they are fixed (a frozen backbone), else an EMA of the batch means (end to end)."""

    def __init__(
        self,
        weight: float,
        reference: Sequence[Tensor] | None = None,
        momentum: float = EMA_MOMENTUM,
        scope: str = "scorer",
        loss: str = "rank",
        sharpness: float = 1.0,
    ):
        self.weight, self.momentum, self.scope, self.fit, self.sharpness = weight, momentum, scope, loss, sharpness
        self.fixed = reference is not None
        self.reference = [r.detach() for r in reference] if reference is not None else None
        # torchrun with DistributedDataParallel (set by the loop): each batch is this rank's share of a global one;
        # the term is then that of the global batch and its running state the same on every rank
        self.data_parallel = False

    @staticmethod
    def check_head(head: nn.Module) -> None:
        if not (getattr(head, "has_alpha", False) and hasattr(head, "attention")):
            raise LayaError(
                f"--align needs input-conditioned attention α: --head laya "
                f"(not {getattr(head, 'kind', type(head).__name__)})"
            )

    def _reference_for(self, feats: Sequence[Tensor]) -> list[Tensor]:
        if self.fixed:
            return [r.to(f.device) for r, f in zip(self.reference, feats)]
        means = batch_means(feats, self.data_parallel)  # data-parallel: the global batch's, on every rank
        self.reference = (
            means
            if self.reference is None
            else [self.momentum * r.to(m.device) + (1 - self.momentum) * m for r, m in zip(self.reference, means)]
        )
        return self.reference

    needs_rows = False  # whether the loop hands ``loss`` each batch's row indices (the network target, frozen)

    def loss(self, head: nn.Module, feats: Sequence[Tensor], logits: Tensor, inputs=None, rows=None) -> Tensor:
        """The weighted term on one batch; ``inputs`` (the batch as the model takes it) and ``rows`` (its row
        indices) are for the network target (``network_target.NetworkAlignment``)."""
        target = logits.detach().argmax(-1)
        reference = self._reference_for(feats)
        return self.weight * alignment_loss(
            head, feats, target, reference, self.scope, None, self.data_parallel, self.fit, self.sharpness
        )

    def state_dict(self) -> dict:
        """What ``--resume`` must restore: the EMA reference (a fixed one is rebuilt from the data)."""
        return {"reference": None if self.fixed or self.reference is None else [r.cpu() for r in self.reference]}

    def load_state_dict(self, state: dict | None) -> None:
        if state and not self.fixed and state.get("reference") is not None:
            self.reference = list(state["reference"])
