"""Predictions from the layers ≤ k only: masked heads, refitted heads, and the truncated checkpoint.

A model cut after tap k has r_1..r_k and nothing above. A head with a layer weighting α
(``maskable``: laya, scalarmix) then predicts with α masked above k and renormalised over the
layers ≤ k. The LAYA scorer still reads one vector per layer: for the layers above k it reads the
removal reference r̄_i (the mean training features stored in the checkpoint), a constant, so
nothing above tap k is needed (docs/depth.md). ``fold_head`` turns that masked head into an
ordinary head of the same kind over k layers (the constant scorer inputs folded into its bias,
softmax over L restricted to k and renormalised = softmax over the first k scores), which is what
a truncated checkpoint stores. ``refit_head`` instead retrains a head of the same kind on the
cached features of the taps ≤ k (every head kind).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..model.heads import HeadOutput, build_head, head_kind
from ..model.settings import HeadSettings
from ..runtime.errors import LayaError
from ..training.settings import TrainingSettings


def check_k(k: int, n_layers: int, option: str = "--truncate") -> int:
    if not isinstance(k, int) or not 1 <= k <= n_layers:
        raise LayaError(
            f"{option} must be a depth between 1 and {n_layers} (the model taps {n_layers} layers), got {k}"
        )
    return k


def check_maskable(head: nn.Module) -> None:
    if not getattr(head, "maskable", False):
        raise LayaError(
            f"a {head_kind(head)} head has no layer weighting α to mask above depth k; "
            f"--refit retrains a head on the layers ≤ k and works for every head"
        )


def keep_mask(n_layers: int, k: int, device=None) -> Tensor:
    """(L,) ones for the layers ≤ k, zeros above."""
    m = torch.zeros(n_layers, device=device)
    m[:k] = 1
    return m


def truncated_inputs(feats: Sequence[Tensor], reference: Sequence[Tensor], k: int) -> list[Tensor]:
    """r_1..r_k as given, the reference r̄_i for every layer above k (broadcast to the batch)."""
    n = feats[0].shape[0]
    return [*feats[:k], *(r.to(feats[0].device, feats[0].dtype).expand(n, -1) for r in reference[k:])]


@torch.no_grad()
def masked_output(head: nn.Module, feats: Sequence[Tensor], reference: Sequence[Tensor], k: int) -> HeadOutput:
    """The head's prediction from the layers ≤ k: α masked above k and renormalised; ``alpha`` is the
    unmasked α the head computes at that depth (its mass on the layers ≤ k drives one exit policy).

    ``feats`` may hold L tensors (the layers above k are ignored) or only the first k. At k = L this is
    exactly the full head."""
    n_layers = len(reference)
    if k == n_layers:
        return head(list(feats))
    inputs = truncated_inputs(feats, reference, k)
    alpha = head(inputs).alpha
    out = head(inputs, alpha_mask=keep_mask(n_layers, k, inputs[0].device))
    return HeadOutput(out.logits, alpha)


@torch.no_grad()
def fold_head(head: nn.Module, reference: Sequence[Tensor], k: int, cfg: HeadSettings, num_classes: int) -> nn.Module:
    """An ordinary head over the first k layers that equals ``masked_output(head, ·, reference, k)``."""
    check_maskable(head)
    n_layers = len(reference)
    dims = [int(r.shape[-1]) for r in reference]
    if k == n_layers:
        return copy.deepcopy(head)
    kind = head_kind(head)
    if getattr(head, "reads_positions", False):  # its α reads the positions of every layer, not constants above k
        raise LayaError(f"cannot fold a head whose α reads each layer's positions to {k} layers; use --refit")
    small = build_head(kind, dims[:k], num_classes, cfg).to(reference[0].device)
    ref = [r.float().unsqueeze(0) for r in reference]
    if kind == "laya":
        small.adapters = copy.deepcopy(head.adapters[:k])
        small.psi = copy.deepcopy(head.psi)
        small.classifier = copy.deepcopy(head.classifier)
        d = head.classifier.in_features
        u_above = head.psi(head.embed(ref)[:, k:])  # ψ(z̄_i) for the layers above k: constants
        first, last = head.scorer[0], head.scorer[2]
        s_first, s_last = small.scorer[0], small.scorer[2]
        s_first.weight.copy_(first.weight[:, : k * d])
        s_first.bias.copy_(first.bias + first.weight[:, k * d :] @ u_above.flatten())
        s_last.weight.copy_(last.weight[:k])
        s_last.bias.copy_(last.bias[:k])
    elif kind == "scalarmix":
        small.adapters = copy.deepcopy(head.adapters[:k])
        small.classifier = copy.deepcopy(head.classifier)
        small.mix_logits.copy_(head.mix_logits[:k])
        small.gamma.copy_(head.gamma)
    else:  # a maskable head kind this function does not know how to fold
        raise LayaError(f"cannot fold a {kind} head to {k} layers; use --refit")
    return small.eval()


def refit_head(
    kind: str,
    train: tuple[list[Tensor], Tensor],
    val: tuple[list[Tensor], Tensor],
    k: int,
    num_classes: int,
    head_cfg: HeadSettings,
    train_cfg: TrainingSettings,
    on_epoch=None,
    widths: Sequence[int] | None = None,
) -> tuple[nn.Module, list]:
    """A head of ``kind`` trained from scratch on the first k layers' features (Adam, early stopping on
    validation accuracy, best weights restored: ``train.fit`` with the checkpoint's settings). ``widths``: the
    layers' pooled widths d_i, where the features carry more (r_i packed with positions); else their widths."""
    from ..training.loop import fit

    (tx, ty), (vx, vy) = train, val
    dims = list(widths[:k]) if widths is not None else [int(f.shape[-1]) for f in tx[:k]]
    torch.manual_seed(train_cfg.seed)
    head = build_head(kind, dims, num_classes, head_cfg).to(train_cfg.device)
    history = fit(head, (list(tx[:k]), ty), (list(vx[:k]), vy), train_cfg, on_epoch=on_epoch)
    return head.eval(), history
