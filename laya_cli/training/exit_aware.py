"""Exit-aware training of a language model's LAYA head (``laya train --task lm --exit-aware W``; issue 47).

``laya depth``'s per-token early exit reads the head truncated at depth k: the layers above k replaced by the
training mean r̄, α masked above k and renormalised (``depthing.token_exit.truncated_laya``). A head trained on
full depth only never sees that input, so its truncated predictions are worse than they need be and an exit that
trusts them costs cross-entropy. Exit-aware training adds, for every training position, W · the objective of the
head truncated at a depth k drawn uniformly from 1..L−1 (depth L is the full head, trained already), on the input
``model.lenses.truncated_states`` builds for ``laya depth``: one more head pass per position, no backbone
pass. r̄ is the one the checkpoint stores (``ReferenceSum``: epoch 1's first
``--eval-tokens`` positions), as far as it is summed at that step. The depths are drawn for the whole global batch
from a generator of the seed and the epoch, and each rank takes its rows: under torchrun the same depths fall on
the same positions as in one process. Measured in docs/lm.md (exit-aware training).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..runtime.distributed import shard_bounds


def truncation_depths(n: int, n_layers: int, generator: torch.Generator | None = None) -> Tensor:
    """(n,) depths k ∈ 1..L−1, uniform."""
    return torch.randint(1, n_layers, (n,), generator=generator)


class ExitAware:
    """W, the r̄ and the depths of one run; ``reference()`` follows the ``ReferenceSum`` while it is still summed."""

    def __init__(self, weight: float, summed, seed: int):
        self.weight, self.summed, self.seed = weight, summed, seed
        self.generator = torch.Generator().manual_seed(seed)

    def start_epoch(self, epoch: int) -> None:
        """The depths of every epoch from the seed alone (a rerun, or a resumed epoch, draws the same ones)."""
        self.generator = torch.Generator().manual_seed(self.seed + 7_368_787 * epoch)

    def depths(self, n_blocks: int, per_block: int, n_layers: int) -> Tensor:
        """This rank's rows of the depths of one global batch of ``n_blocks`` × ``per_block`` positions."""
        every = truncation_depths(n_blocks * per_block, n_layers, self.generator)
        lo, hi = shard_bounds(n_blocks)
        return every[lo * per_block : hi * per_block]

    def reference(self, device) -> Tensor:
        return self.summed.running(device)  # still summing (epoch 1's first positions): the mean so far
