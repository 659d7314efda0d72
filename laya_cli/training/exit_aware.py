"""Exit-aware training of a language model's LAYA head (``laya train --task lm --exit-aware W``; issue 47).

``laya depth``'s per-token early exit reads the head truncated at depth k: the layers above k replaced by the
training mean r̄, α masked above k and renormalised (``depthing.token_exit.truncated_laya``). A head trained on
full depth only never sees that input, so its truncated predictions are worse than they need be and an exit that
trusts them costs cross-entropy. Exit-aware training adds, for every training position, W · the objective of the
head truncated at a depth k drawn uniformly from 1..L−1 (depth L is the full head, trained already): one more head
pass per position, no backbone pass. r̄ is the one the checkpoint stores (``ReferenceSum``: epoch 1's first
``--eval-tokens`` positions), as far as it is summed at that step. Measured in docs/lm.md (exit-aware training).
"""

from __future__ import annotations

import torch
from torch import Tensor


def truncation_depths(n: int, n_layers: int, device=None) -> Tensor:
    """(n,) depths k ∈ 1..L−1, uniform, from torch's global generator (seeded by ``--seed``, so a run replays)."""
    return torch.randint(1, n_layers, (n,)).to(device)


def truncated_inputs(hs: Tensor, reference: Tensor, depths: Tensor) -> tuple[Tensor, Tensor]:
    """(states, mask): each position's layers above its depth replaced by r̄ (L, d), and the (n, L) mask of the
    layers it keeps — the input and the α mask of ``truncated_laya`` at that depth."""
    keep = torch.arange(hs.shape[1], device=hs.device) < depths.unsqueeze(1)
    return torch.where(keep.unsqueeze(-1), hs, reference.to(hs.dtype)), keep.to(hs.dtype)


class ExitAware:
    """W and the r̄ of one run; ``reference()`` follows the ``ReferenceSum`` while it is still being summed."""

    def __init__(self, weight: float, summed):
        self.weight, self.summed, self._seen, self._mean = weight, summed, -1, None

    def reference(self, device) -> Tensor:
        if self.summed.n != self._seen:  # still summing (epoch 1's first positions): the mean so far
            self._seen, self._mean = self.summed.n, torch.stack(self.summed.means()).to(device)
        return self._mean
