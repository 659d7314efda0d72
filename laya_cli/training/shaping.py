"""Training that keeps α informative (issue 36; evidence in docs/results/collapse.md).

On a frozen pretrained transformer the LAYA head learns to put nearly all of α on one layer per sample: the last
layers' features are larger and more separable, so the head routes each sample to one of them and α no longer says
which depths drive it. Three training-time options act on α (``laya train``; a fourth, ``--exit-aware``, trains the
head truncated at random depths: ``exit_aware.py``); none changes the head's
architecture, so a checkpoint trained with them loads and audits like any other:

- ``--layer-dropout P``: each training sample's α is taken over a random subset of the layers — every layer is
  dropped with probability P, independently, and a sample that would lose them all keeps one drawn uniformly —
  through the head's ``alpha_mask`` (masked and renormalised, the ``mask`` removal). The head must find what each
  layer holds. Off at evaluation: validation, the test split, the audit see every layer.
- ``--alpha-entropy λ``: adds λ_e · mean_x KL(α(x) ‖ uniform) / log L = λ_e · (1 − H(α(x)) / log L), the
  normalised entropy deficit of α (0 when uniform, 1 when one-hot; the entropy is the one of
  ``auditing.collapse.alpha_entropy``, computed from log-softmax so it has a gradient everywhere). The schedule
  (``--alpha-entropy-schedule``): ``constant`` λ_e = λ, or ``linear`` from λ at epoch 1 to 0 at epoch ``--epochs``.
- ``--tau-start T0``: the attention's temperature τ is annealed linearly from T0 at epoch 1 to the head's ``--tau``
  at epoch ``--epochs``. Validation (and so early stopping) always evaluates at ``--tau``, the τ the checkpoint
  holds, so the restored weights are judged at the temperature they will be used with.

The layer mask is drawn from torch's global generator (seeded by ``--seed``, saved in the resumable state), so a
run is reproducible and ``--resume`` replays it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .exit_aware import TruncatedTerm
from .settings import TrainingSettings


def layer_dropout_mask(
    n: int, n_layers: int, p: float, device=None, generator: torch.Generator | None = None
) -> Tensor:
    """(n, L) float mask of kept layers: each dropped with probability ``p``, never all of one row (a row that
    lost every layer keeps one, drawn uniformly)."""
    keep = torch.rand(n, n_layers, generator=generator, device=device) >= p
    empty = ~keep.any(-1)
    if empty.any():
        pick = torch.randint(n_layers, (int(empty.sum()),), generator=generator, device=device)
        keep[empty.nonzero().squeeze(-1), pick] = True
    return keep.float()


def entropy_deficit(log_alpha: Tensor) -> Tensor:
    """mean over rows of KL(α ‖ uniform) / log L = 1 − H(α) / log L, from log α (B, L); 0 for L = 1."""
    n_layers = log_alpha.shape[-1]
    if n_layers < 2:
        return log_alpha.new_zeros(())
    entropy = -(log_alpha.exp() * log_alpha).sum(-1)
    return (1 - entropy / math.log(n_layers)).mean()


def entropy_weight(weight: float, schedule: str, epoch: int, epochs: int) -> float:
    """λ_e of epoch ``epoch`` (1-based) of ``epochs``: λ (constant), or linear from λ at epoch 1 to 0 at the last."""
    if schedule == "constant" or epochs < 2:
        return weight
    return weight * max(0.0, (epochs - epoch) / (epochs - 1))


def tau_at(start: float, end: float, epoch: int, epochs: int) -> float:
    """τ of epoch ``epoch``: linear from ``start`` at epoch 1 to ``end`` at epoch ``epochs`` (and after)."""
    if epochs < 2:
        return end
    t = min(1.0, (epoch - 1) / (epochs - 1))
    return start + t * (end - start)


class AlphaShaping:
    """The three options of one run, applied epoch by epoch and batch by batch (``training.loop``)."""

    def __init__(self, cfg: TrainingSettings, head: nn.Module, reference: Sequence[Tensor] | None = None):
        self.cfg, self.final_tau = cfg, getattr(head, "tau", None)
        self.weight = cfg.alpha_entropy
        # --exit-aware (exit_aware.py): r̄ of fixed features, None end to end (each batch's own mean)
        self.truncated = TruncatedTerm(cfg.exit_aware, reference) if cfg.exit_aware else None

    @staticmethod
    def wanted(cfg: TrainingSettings) -> bool:
        return bool(cfg.shapes_alpha())

    def start_epoch(self, head: nn.Module, epoch: int) -> None:
        """Set this epoch's λ_e, and τ_e on the head for its training steps."""
        cfg = self.cfg
        self.weight = entropy_weight(cfg.alpha_entropy, cfg.alpha_entropy_schedule, epoch, cfg.epochs)
        if cfg.tau_start is not None:
            head.tau = tau_at(cfg.tau_start, self.final_tau, epoch, cfg.epochs)

    def end_epoch(self, head: nn.Module) -> None:
        """Back to the head's own τ: validation, the checkpoint and every later use see ``--tau``."""
        if self.cfg.tau_start is not None:
            head.tau = self.final_tau

    def mask(self, n: int, n_layers: int, device) -> Tensor | None:
        if not self.cfg.layer_dropout:
            return None
        return layer_dropout_mask(n, n_layers, self.cfg.layer_dropout).to(device)

    def loss(self, head: nn.Module, feats: Sequence[Tensor], y: Tensor) -> Tensor | float:
        """λ_e · the entropy deficit of the head's (unmasked) α on this batch, plus the ``--exit-aware`` term on
        its labels ``y``; 0 when both are off."""
        total = self.truncated.loss(head, feats, y) if self.truncated is not None else 0.0
        if not self.weight:
            return total
        return total + self.weight * entropy_deficit(head.log_attention(head.embed(feats), feats))
