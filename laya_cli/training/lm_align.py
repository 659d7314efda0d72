"""``laya train --task lm --align λ --align-target network``: α per token fitted to the network-scope effects.

    loss = objective + λ · fitting_loss(log α(t), Δᴺ(t))      at ``ALIGN_POSITIONS`` positions t of each batch
    Δᴺ_i(t) = p_ŷ(t) − p_ŷ(t with layer i bypassed inside the model, the later layers run on)

Δᴺ is what ``laya audit --scope network`` ranks α against on a language model, computed by the audit's own code:
the bypassed states of ``auditing.tokens.bypassed_states`` (each layer's output := its input, at every position of
the block) read by the current head through ``auditing.network.patching.removal_effects`` (L + 1 head passes); ŷ is
the head's predicted next token, as the audit's default ``--target predicted``. The fit (``--align-loss``: rank,
distill or both) and what it trains (``--align-scope``) are ``alignment.alignment_loss``'s, as for classifiers.

Recomputed every step rather than cached: the model is frozen, so the bypassed states of a fixed sample of
positions could be kept and only the L + 1 head passes redone, but ``--task lm`` trains one epoch by default and
no position comes back within one, so a cache would cost the same passes plus its memory (k · L(L+1)/2 · d floats
a step) and save nothing; at E epochs it would save (E − 1)/E of them. The cost per step is L passes of one block
(``benchmarks/lm_align.py`` measures it beside the plain run). ``--align-target head`` is not built per token: the
head's own leave-one-layer-out effects need r̄ while it is still being summed (refused in ``cli/train.py``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..auditing.network.patching import removal_effects
from ..auditing.tokens import bypassed_states
from ..runtime import distributed
from ..runtime.config import ALIGN_LOSSES, ALIGN_SCOPES
from ..runtime.errors import LayaError, match_choice
from .alignment import alignment_loss

# The positions of each batch whose effects are computed, all drawn from one of its blocks: one bypassed pass of a
# block (L of them) gives every position's states, so the cost is L passes of one block whatever k ≤ T − 1; the
# head passes grow with k (L + 1 readouts over the vocabulary each). 16 as the classifiers' frozen target
# (network_target.FROZEN_SUBSET: 16, 32 and every row measured alike there).
ALIGN_POSITIONS = 16


def sampled_positions(n_blocks: int, per_block: int, k: int, generator: torch.Generator) -> tuple[int, Tensor]:
    """(the block, its sorted positions): ``k`` positions (all when k ≥ per_block) of one of ``n_blocks`` blocks of
    ``per_block`` predicted positions, seeded."""
    block = int(torch.randint(n_blocks, (1,), generator=generator))
    positions = torch.randperm(per_block, generator=generator)[: min(k, per_block)].sort().values
    return block, positions


@torch.no_grad()
def network_target(backbone, head: nn.Module, x: Tensor, clean: Tensor, positions: Tensor):
    """(r_1..r_L, ŷ, Δᴺ) at ``positions`` of the one block ``x`` (1, 2, T): ``clean`` (k, L, d) the layers' states
    there (``features.positions.token_states``), ŷ (k,) the head's predicted next tokens, Δᴺ (k, L) the drop of
    p_ŷ when each layer is bypassed (module docstring)."""
    feats = [clean[:, j] for j in range(clean.shape[1])]
    target = head(feats).logits.argmax(-1)
    where = positions.to(x.device)
    removed = []
    for i in range(len(feats)):
        states = bypassed_states(backbone, x, i)
        removed.append([states[j][0, where].to(clean.device) for j in range(i, len(feats))])
    return feats, target, removal_effects(head, feats, removed, target)


HEAD_TARGET = (
    "--align for --task lm fits α to the network-scope effects (each layer bypassed): add --align-target network "
    "(--align-target head is not built per token)"
)


def check_alignment(req) -> None:
    """An ``LMRequest``'s alignment options, in place (the Python API's path; ``laya train`` resolved them from the
    declared settings first): λ ≥ 0 and finite, the target network whenever λ > 0, the loss and scope by name."""
    req.align_loss = match_choice("--align-loss", req.align_loss, ALIGN_LOSSES)
    req.align_scope = match_choice("--align-scope", req.align_scope, ALIGN_SCOPES)
    if not (isinstance(req.align, (int, float)) and math.isfinite(req.align) and req.align >= 0):
        raise LayaError(f"--align must be 0 (off) or positive, got {req.align}")
    if req.align and req.align_target != "network":
        raise LayaError(HEAD_TARGET)
    if not req.align and (req.align_target != "head" or req.align_loss != "rank"):
        raise LayaError("--align-target network and --align-loss say how --align fits α: add --align 1")


class TokenAlignment:
    """``weight · alignment_loss`` at ``ALIGN_POSITIONS`` seeded positions of each batch (module docstring)."""

    def __init__(self, weight: float, scope: str, fit: str, seed: int, k: int = ALIGN_POSITIONS):
        self.weight, self.scope, self.fit, self.k, self.seed = weight, scope, fit, k, seed
        self.generator = torch.Generator().manual_seed(seed)

    def start_epoch(self, epoch: int) -> None:
        """The positions of every epoch from the seed alone (a rerun draws the same ones)."""
        self.generator = torch.Generator().manual_seed(self.seed + 104_729 * epoch)

    def loss(self, backbone, head: nn.Module, x: Tensor, hs: Tensor) -> Tensor | None:
        """The weighted term on this rank's blocks ``x`` (B, 2, T) and their states ``hs`` (B·(T−1), L, d); None
        where the rank holds no block. Under torchrun each rank's term is 1/world of the summed gradient."""
        if not len(x):
            return None
        per_block = x.shape[2] - 1
        block, positions = sampled_positions(len(x), per_block, self.k, self.generator)
        clean = hs[block * per_block + positions.to(hs.device)]
        feats, target, delta = network_target(backbone, head, x[block : block + 1], clean, positions)
        term = alignment_loss(head, feats, target, None, self.scope, delta, loss=self.fit)
        return self.weight * term / distributed.world_size()
