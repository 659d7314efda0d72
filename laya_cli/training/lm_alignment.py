"""``laya train --task lm --align λ``: α per token fitted to what removing a layer does, at sampled positions.

    loss = objective + λ · Σ_targets fitting_loss(log α(t), Δ(t))      at ``ALIGN_POSITIONS`` positions t of a block
    network: Δᴺ_i(t) = p_ŷ(t) − p_ŷ(t with layer i bypassed inside the model, the later layers run on)
    head:    Δᴴ_i(t) = p_ŷ(t) − p_ŷ(t with r_i := r̄_i at the head)            both: the two terms, λ each

Each Δ is what ``laya audit`` ranks α against on a language model at that scope, computed by the audit's own code.
Δᴺ: the bypassed states of ``auditing.lm.bypassed_states`` (each layer's output := its input, at every position
of the block) read by the current head through ``auditing.network.patching.removal_effects`` (L + 1 head passes).
Δᴴ: ``metrics.lolo_effects`` under removal by mean (L + 1 head passes, no model pass), with r̄ as far as it is summed
at that step (``lm.ReferenceSum.running``: the stored r̄ is epoch 1's first ``--eval-tokens`` positions, so after
the first batches it is the audit's own). ŷ is the head's predicted next token, as the audit's default ``--target
predicted``. The fit (``--align-loss``: rank, distill or both) and what it trains (``--align-scope``) are
``alignment.alignment_loss``'s, as for classifiers; ``both`` adds the head's term to the network's, as a classifier's
``--align-target both`` does (``network_target.NetworkAlignment.head_term``).

Recomputed every step rather than cached: the model is frozen, so the bypassed states of a fixed sample of
positions could be kept and only the L + 1 head passes redone, but ``--task lm`` trains one epoch by default and
no position comes back within one, so a cache would cost the same passes plus its memory (k · L(L+1)/2 · d floats
a step) and save nothing; at E epochs it would save (E − 1)/E of them. The cost per step is L passes of one block
(``benchmarks/lm_align.py`` measures it beside the plain run); the head's term adds L + 1 head passes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..auditing.lm import each_bypassed
from ..auditing.metrics import STACK_MIN_ROWS, lolo_effects
from ..auditing.network.patching import removal_effects
from ..runtime import distributed
from ..runtime.device import autocast
from ..runtime.errors import LayaError
from .alignment import alignment_loss
from .settings import NETWORK_TARGETS

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
    there (``features.lm_positions.token_states``), ŷ (k,) the head's predicted next tokens, Δᴺ (k, L) the drop of
    p_ŷ when each layer is bypassed (module docstring)."""
    feats = [clean[:, j] for j in range(clean.shape[1])]
    target = head(feats).logits.argmax(-1)
    where = positions.to(x.device)
    removed = [[h[0, where].to(clean.device) for h in taps] for taps in bypassed_taps(backbone, x)]
    return feats, target, removal_effects(head, feats, removed, target)


# The staircase's largest step holds L copies of the block's states (L · T · d floats): beyond this many, the loop.
STACKED_STATES = 1 << 25


@torch.no_grad()
def bypassed_taps(backbone, x: Tensor) -> list[list[Tensor]]:
    """[i]: taps i..L of the one block ``x`` with layer i bypassed (its output := its input), as ``each_bypassed``
    gives them. On a chain of layers they run as a staircase: before layer j + 1, the bypasses 0..j−1 (their tap j,
    run on earlier) and bypass j (layer j's input) stacked along the batch, one call of layer j + 1 on up to L blocks
    — L − 1 layer calls instead of L(L − 1)/2, the same arithmetic per row (as the audit's
    ``NetworkScope._stacked_removed_taps``). Not stacked: a block of fewer than ``STACK_MIN_ROWS`` positions (a
    matrix product of fewer rows rounds otherwise on a CPU: docs/results/dispatch.md) or a staircase of more than
    ``STACKED_STATES`` floats a step; the loop of ``each_bypassed`` then, from the same one recorded pass."""
    n_layers = len(backbone.layer_names)
    if not backbone.can_continue:
        return [states[i:] for i, states in each_bypassed(backbone, x)]
    with autocast(x.device):
        _, given = backbone.activations_and_inputs(x)
        if given[0].numel() // given[0].shape[-1] < STACK_MIN_ROWS or n_layers * given[0].numel() > STACKED_STATES:
            later = lambda i: backbone.continue_from(i, given[i]) if i + 1 < n_layers else []  # noqa: E731
            return [[h.float() for h in (given[i], *later(i))] for i in range(n_layers)]
        removed, state, n = [[] for _ in range(n_layers)], None, len(x)
        for j in range(n_layers):
            state = given[j] if state is None else torch.cat([state, given[j]])
            for r, rows in enumerate(state.split(n)):
                removed[r].append(rows.float())
            if j + 1 < n_layers:
                state = backbone.continue_from(j, state, upto=j + 2)[0]
    return removed


@torch.no_grad()
def head_target(head: nn.Module, clean: Tensor, reference: Tensor):
    """(r_1..r_L, ŷ, Δᴴ) at positions whose layers' states are ``clean`` (k, L, d): Δᴴ (k, L) the drop of p_ŷ when
    each layer's state is replaced by r̄ (``reference`` (L, d)) at the head, as ``laya audit --scope head``."""
    feats = list(clean.unbind(1))
    target = head(feats).logits.argmax(-1)
    return feats, target, lolo_effects(head, feats, target, list(reference.unbind(0)), "mean")


HEAD_TARGETS = ("head", "both")  # the targets with the head's own term


class TokenAlignment:
    """``weight · alignment_loss`` against ``target``'s effects at ``ALIGN_POSITIONS`` seeded positions of each
    batch (module docstring); ``reference``: the run's ``lm.ReferenceSum`` (the head's term reads its r̄)."""

    def __init__(
        self, weight: float, scope: str, fit: str, seed: int, target: str = "network", reference=None,
        k: int = ALIGN_POSITIONS, sharpness: float = 1.0,
    ):  # fmt: skip
        if target in HEAD_TARGETS and reference is None:
            raise LayaError(f"--align-target {target} needs the run's r̄ (its ReferenceSum)")
        self.weight, self.scope, self.fit, self.target, self.reference = weight, scope, fit, target, reference
        self.k, self.seed, self.sharpness = k, seed, sharpness
        self.generator = torch.Generator().manual_seed(seed)

    def start_epoch(self, epoch: int) -> None:
        """The positions of every epoch from the seed alone (a rerun draws the same ones)."""
        self.generator = torch.Generator().manual_seed(self.seed + 104_729 * epoch)

    def loss(self, backbone, head: nn.Module, x: Tensor, hs: Tensor) -> Tensor | None:
        """The weighted term on this rank's blocks ``x`` (B, 2, T) and their states ``hs`` (B·(T−1), L, d); None
        where the rank holds no block. Under torchrun each rank's term is 1/world of the summed gradient."""
        # r̄ first: while it is summed every rank takes part in its all-reduce, a rank without a block too
        r_bar = self.reference.running(hs.device) if self.target in HEAD_TARGETS else None
        if not len(x):
            return None
        per_block = x.shape[2] - 1
        block, positions = sampled_positions(len(x), per_block, self.k, self.generator)
        clean = hs[block * per_block + positions.to(hs.device)]
        terms = []
        if self.target in NETWORK_TARGETS:
            feats, target, delta = network_target(backbone, head, x[block : block + 1], clean, positions)
            terms.append(
                alignment_loss(head, feats, target, None, self.scope, delta, loss=self.fit, sharpness=self.sharpness)
            )
        if r_bar is not None:
            feats, target, delta = head_target(head, clean, r_bar)
            terms.append(
                alignment_loss(head, feats, target, None, self.scope, delta, loss=self.fit, sharpness=self.sharpness)
            )
        return self.weight * sum(terms) / distributed.world_size()
