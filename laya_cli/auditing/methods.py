"""Per-sample, per-layer attribution scores (docs/metrics.md, "The methods"). Each returns a (B, L) tensor.

Gradient methods are Captum's, applied to the head inputs (r_1 … r_L) with the explained
output p_ŷ (softmax probability of the target class); never re-implemented here.
What each method is (its scores here, its network-scope attribution, what it needs): ``registry.METHODS``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..runtime.errors import LayaError, unknown_choice


def laya_attention(head: nn.Module, feats: Sequence[Tensor]) -> Tensor:
    """α(x): the head's own input-conditioned layer weights."""
    with torch.no_grad():
        alpha = head(feats).alpha
    if alpha is None:
        raise LayaError("this head has no layer attention (only laya and scalarmix heads do)")
    return alpha


def contrib(head: nn.Module, feats: Sequence[Tensor], target: Tensor) -> Tensor:
    """α_i·((W z_i)_ŷ − (W z_i)_ŷ₂): layer i's additive share of the decision margin, in float64.

    ŷ = ``target``; ŷ₂ = the runner-up class (highest logit other than ŷ).
    Σ_i contrib_i = logit_ŷ − logit_ŷ₂ − (b_ŷ − b_ŷ₂).
    """
    if not getattr(head, "has_layer_logits", False):
        raise LayaError("contrib needs a LAYA head (logits = W Σ α_i z_i + b)")
    if feats[0].device.type == "mps":  # no float64 on Apple's MPS: compute on the CPU
        cpu = contrib(copy.deepcopy(head).cpu(), [f.cpu() for f in feats], target.cpu())
        return cpu.float().to(feats[0].device)
    head64 = copy.deepcopy(head).double()
    with torch.no_grad():
        feats64 = [f.double() for f in feats]
        logits, alpha = head64(feats64)
        per_layer = head64.layer_logits(feats64)  # (B, L, C)
        masked = logits.clone()
        masked.scatter_(1, target.view(-1, 1), float("-inf"))
        runner_up = masked.argmax(-1)
        rows = torch.arange(len(target))
        margin = per_layer[rows, :, target] - per_layer[rows, :, runner_up]  # (B, L)
    return alpha * margin


# --------------------------------------------------------------------------- reductions

# One score per layer from per-feature attributions (B, d_i) -> (B,).
REDUCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "sum": lambda a: a.sum(-1),  # signed (the default, docs/metrics.md)
    "abs": lambda a: a.abs().sum(-1),
    "l2": lambda a: a.norm(dim=-1),
}


def reduce_layers(attrs: Sequence[Tensor], reduce: str = "sum") -> Tensor:
    """Per-feature attributions of each layer, (B, d_i) each, to one score per layer: (B, L)."""
    if reduce not in REDUCTIONS:
        raise unknown_choice("reduction", reduce, REDUCTIONS)
    return torch.stack([REDUCTIONS[reduce](a.flatten(1)) for a in attrs], dim=1)


# --------------------------------------------------------------------------- Captum methods


def probability_forward(head: nn.Module) -> Callable[..., Tensor]:
    """Captum's forward func: (r_1, …, r_L) -> softmax probabilities (B, C).

    Captum selects the target column, so the explained output is p_ŷ. Every input is tied
    into the graph with a zero term: a ``last`` head reads only r_L, and Captum's autograd
    call would otherwise fail on the unused layers instead of giving them zero attribution.
    """

    def forward(*feats: Tensor) -> Tensor:
        probs = torch.softmax(head(list(feats)).logits, dim=-1)
        tie = torch.stack([(f.flatten(1) * 0).sum(-1) for f in feats]).sum(0)
        return probs + tie.unsqueeze(-1)

    return forward


def _leaves(feats: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return tuple(f.detach().float().requires_grad_(True) for f in feats)


def _baselines(baseline: Sequence[Tensor] | None, inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """r̄_i as (1, d_i) rows, broadcast by Captum; zeros where no reference is given."""
    if baseline is None:
        return tuple(torch.zeros_like(x[:1]) for x in inputs)
    if len(baseline) != len(inputs):
        raise LayaError(f"the reference has {len(baseline)} layers but the features have {len(inputs)}")
    return tuple(b.to(x.device, x.dtype).reshape(1, *x.shape[1:]) for b, x in zip(baseline, inputs))


def integrated_gradients(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    baseline: Sequence[Tensor] | None = None,
    n_steps: int = 32,
    internal_batch_size: int | None = None,
    reduce: str = "sum",
    return_delta: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Captum IntegratedGradients of p_ŷ over the tuple (r_1 … r_L) from the baseline r̄.

    One Captum call attributes all layers (the r_i are independent inputs of the head).
    ``internal_batch_size`` bounds memory: at most that many rows per head pass (Captum's own
    option; batches larger than it are first split into chunks of that many samples).
    With ``return_delta``, also returns Captum's convergence delta per sample:
    Σ attributions − (p_ŷ(x) − p_ŷ(r̄)).
    """
    from captum.attr import IntegratedGradients

    if internal_batch_size is not None and len(target) > internal_batch_size:
        # Captum's chunks never go below one row per sample: split the samples ourselves.
        parts = [
            integrated_gradients(
                head,
                [f[s : s + internal_batch_size] for f in feats],
                target[s : s + internal_batch_size],
                baseline,
                n_steps,
                internal_batch_size,
                reduce,
                return_delta,
            )
            for s in range(0, len(target), internal_batch_size)
        ]
        if return_delta:
            return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        return torch.cat(parts)
    inputs = _leaves(feats)
    out = IntegratedGradients(probability_forward(head)).attribute(
        inputs,
        baselines=_baselines(baseline, inputs),
        target=target,
        n_steps=n_steps,
        internal_batch_size=internal_batch_size,
        return_convergence_delta=return_delta,
    )
    if return_delta:
        attrs, delta = out
        return reduce_layers(attrs, reduce).detach(), delta.detach()
    return reduce_layers(out, reduce).detach()


def attribution_patching(
    head: nn.Module, feats: Sequence[Tensor], target: Tensor, baseline: Sequence[Tensor] | None, reduce: str = "sum"
) -> Tensor:
    """Attribution patching (AtP; Kramár et al. 2024): (r_i − r̄_i) ⊙ ∂p_ŷ/∂r_i, the first-order estimate of what
    replacing r_i by the removal's reference does, reduced per layer. The gradients are Captum's (Saliency
    without the absolute value); ``baseline`` None is the zero reference."""
    from captum.attr import Saliency

    inputs = _leaves(feats)
    grads = Saliency(probability_forward(head)).attribute(inputs, target=target, abs=False)
    refs = _baselines(baseline, inputs)
    return reduce_layers([(x.detach() - r) * g for x, r, g in zip(inputs, refs, grads)], reduce).detach()


def gradient_x_activation(head: nn.Module, feats: Sequence[Tensor], target: Tensor, reduce: str = "sum") -> Tensor:
    """Captum InputXGradient on (r_1 … r_L): r_i ⊙ ∂p_ŷ/∂r_i, reduced per layer."""
    from captum.attr import InputXGradient

    attrs = InputXGradient(probability_forward(head)).attribute(_leaves(feats), target=target)
    return reduce_layers(attrs, reduce).detach()


def saliency(head: nn.Module, feats: Sequence[Tensor], target: Tensor, reduce: str = "sum") -> Tensor:
    """Captum Saliency (abs=True): |∂p_ŷ/∂r_i|, summed per layer (``l2`` gives its norm)."""
    from captum.attr import Saliency

    attrs = Saliency(probability_forward(head)).attribute(_leaves(feats), target=target, abs=True)
    return reduce_layers(attrs, reduce).detach()


# --------------------------------------------------------------------------- static and floor


@torch.no_grad()
def mean_attention(head: nn.Module, batches: Iterable[Sequence[Tensor]]) -> Tensor:
    """Mean α over a reference set (an iterable of feature batches): the ``global`` weights.

    For a ScalarMix head α is softmax(w) for every sample, so this is exactly softmax(w).
    """
    total, n = None, 0
    for feats in batches:
        alpha = laya_attention(head, feats).double()
        total = alpha.sum(0) if total is None else total + alpha.sum(0)
        n += len(alpha)
    if not n:
        raise LayaError("global weights need at least one sample")
    return (total / n).float()


def global_weights(weights: Tensor, batch_size: int) -> Tensor:
    """The same static layer weights for every sample: (B, L)."""
    return weights.unsqueeze(0).expand(batch_size, -1)


def random_scores(batch_size: int, num_layers: int, generator: torch.Generator | None = None) -> Tensor:
    """Seeded uniform scores in [0, 1): the floor every method must beat (drawn on the CPU)."""
    return torch.rand(batch_size, num_layers, generator=generator)


# --------------------------------------------------------------------------- context


@dataclass
class AttributionContext:
    """What the methods need besides the head and the batch of features."""

    target: Tensor  # (B,) the explained class ŷ
    baseline: Sequence[Tensor] | None = None  # r̄_i per layer (IG); None = zeros
    n_steps: int = 32
    internal_batch_size: int | None = None
    reduce: str = "sum"
    generator: torch.Generator | None = None  # random
    global_weights: Tensor | None = None  # (L,) static weights for ``global``
