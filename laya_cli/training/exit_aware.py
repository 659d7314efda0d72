"""Exit-aware training (``laya train --exit-aware W``; issue 47): the head also trained truncated at a random depth.

``laya depth``'s early exit reads the head truncated at depth k: the layers above k replaced by the training mean
r̄, α masked above k and renormalised (``depthing.truncation.masked_output`` for a classifier,
``depthing.lm_exit.truncated_laya`` per token). A head trained on full depth only never sees that input, so its
truncated predictions are worse than they need be and an exit that trusts them costs accuracy. Exit-aware training
adds W · the objective of the head truncated at a depth k drawn uniformly from 1..L−1 per sample (depth L is the
full head, trained already): one more head pass, no backbone pass.

- Language models (``ExitAware``): every training position, on the input ``model.lm_heads.truncated_states`` builds
  for ``laya depth``; r̄ is the one the checkpoint stores (``ReferenceSum``: epoch 1's first ``--eval-tokens``
  positions), as far as it is summed at that step. The depths are drawn for the whole global batch from a generator
  of the seed and the epoch, and each rank takes its rows: under torchrun the same depths fall on the same
  positions as in one process. Measured in docs/lm.md (exit-aware training).
- Classifiers (``TruncatedTerm``, through ``shaping.AlphaShaping``): the cross-entropy of each training sample
  truncated at its depth. r̄ is the training mean of a frozen backbone's features (the checkpoint's), and the
  batch's own mean end to end: the features move while training, and a batch mean keeps the term stateless (a
  resumed run needs nothing saved). The depths come from torch's global generator, as ``--layer-dropout``'s mask
  (seeded by ``--seed``, saved in the resumable state). One process only, as the other options of ``shaping``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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


def truncated_rows(feats: Sequence[Tensor], reference: Sequence[Tensor], depths: Tensor) -> tuple[list[Tensor], Tensor]:
    """(r'_1..r'_L, keep): each row b's layers above its depth ``depths[b]`` replaced by r̄_i, and the (n, L) mask of
    the layers it keeps — a classifier head's input and α mask truncated per row (``model.lm_heads.truncated_states``
    for the stacked states of a language model; ``depthing.truncation.truncated_inputs`` for one k)."""
    keep = torch.arange(len(feats), device=depths.device) < depths.unsqueeze(1)
    seen = [
        torch.where(keep[:, i].view(-1, *[1] * (f.dim() - 1)).to(f.device), f, r.to(f.device, f.dtype))
        for i, (f, r) in enumerate(zip(feats, reference))
    ]
    return seen, keep.to(feats[0].dtype)


class TruncatedTerm:
    """W · the cross-entropy of a classifier head truncated at a random depth per sample (module docstring);
    ``reference``: r̄ of fixed features (a frozen backbone), None: each batch's own mean (end to end)."""

    def __init__(self, weight: float, reference: Sequence[Tensor] | None = None):
        self.weight = weight
        self.reference = None if reference is None else [r.detach() for r in reference]

    def loss(self, head: nn.Module, feats: Sequence[Tensor], y: Tensor) -> Tensor | float:
        if len(feats) < 2 or not len(y):  # one layer: no depth to exit at
            return 0.0
        depths = truncation_depths(len(y), len(feats)).to(y.device)
        reference = self.reference or [f.detach().mean(0) for f in feats]
        seen, keep = truncated_rows(feats, reference, depths)
        return self.weight * F.cross_entropy(head(seen, alpha_mask=keep.to(y.device)).logits, y)
