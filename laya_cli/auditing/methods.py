"""Per-sample, per-layer attribution scores (docs/metrics.md, "The methods"). Each returns a (B, L) tensor.

Gradient methods are Captum's, applied to the head inputs (r_1 … r_L) with the explained
output p_ŷ (softmax probability of the target class); never re-implemented here.
What each method is (its scores here, its network-scope attribution, what it needs): ``registry.METHODS``.
"""

from __future__ import annotations

import copy
import math
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


class Joined:
    """The L head inputs as one (B, Σ d_i) tensor, so Captum scales, differentiates and multiplies one input instead
    of L: the same element-wise arithmetic per feature (every attribution bit for bit the same), L times fewer
    operations per step of IG (docs/results/dispatch.md). ``split`` gives the r_i back, each a fresh contiguous
    copy (the head's matrix products see the memory layout they saw as separate inputs)."""

    def __init__(self, feats: Sequence[Tensor]):
        self.shapes = [tuple(f.shape[1:]) for f in feats]
        self.widths = [math.prod(shape) for shape in self.shapes]

    def join(self, feats: Sequence[Tensor]) -> Tensor:
        return torch.cat([f.reshape(len(f), -1) for f in feats], dim=1) if len(feats) > 1 else feats[0].flatten(1)

    def views(self, x: Tensor) -> list[Tensor]:
        """The r_i of a joined (N, Σ d_i) tensor, as views of it."""
        parts = torch.split(x, self.widths, dim=1) if len(self.widths) > 1 else (x,)
        return [p.reshape(len(p), *shape) for p, shape in zip(parts, self.shapes)]

    def split(self, x: Tensor) -> list[Tensor]:
        return [p.contiguous() for p in self.views(x)]


def probability_forward(head: nn.Module, joined: Joined | None = None) -> Callable[..., Tensor]:
    """Captum's forward func: (r_1, …, r_L) -> softmax probabilities (B, C); with ``joined``, one (B, Σ d_i)
    input is also accepted (``Joined``) and split into the r_i.

    Captum selects the target column, so the explained output is p_ŷ. Every input is tied
    into the graph with a zero term: a ``last`` head reads only r_L, and Captum's autograd
    call would otherwise fail on the unused layers instead of giving them zero attribution.
    """

    def forward(*feats: Tensor) -> Tensor:
        parts = joined.split(feats[0]) if joined is not None and len(feats) == 1 else list(feats)
        probs = torch.softmax(head(parts).logits, dim=-1)
        tie = torch.stack([(f.flatten(1) * 0).sum(-1) for f in feats]).sum(0)
        return probs + tie.unsqueeze(-1)

    return forward


def batch_total(head: nn.Module, joined: Joined) -> Callable[[Tensor, Tensor], Tensor]:
    """Captum's forward func on the joined input: Σ over the rows of p_ŷ, a (1,) tensor, with ŷ per row handed in
    as an additional forward argument (Captum repeats it over IG's steps as it would its ``target``).

    Captum seeds one backward pass per output row (a ``ones_like`` for each of the B·steps rows); a head treats
    its rows independently, so the gradient of the rows' total is each row's own gradient, bit for bit, from one
    seed."""
    forward = probability_forward(head, joined)

    def total(x: Tensor, target: Tensor) -> Tensor:
        return forward(x).gather(1, target.reshape(-1, 1)).sum().reshape(1)

    return total


def convergence_delta(
    forward: Callable[..., Tensor],
    attrs: Sequence[Tensor],
    baselines: Sequence[Tensor],
    inputs: Sequence[Tensor],
    target: Tensor,
    endpoints: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """Captum's convergence delta (``GradientAttribution.compute_convergence_delta``: Σ attributions −
    (p_ŷ(x) − p_ŷ(r̄)) per sample) in the same arithmetic, in the same order, but the sum over the layers as L
    additions of (B,) vectors instead of B·L additions of scalars (Captum sums each sample's layers in a Python
    loop over the samples). ``forward``: (r_1 … r_L) -> probabilities (B, C); ``baselines``: (1, …) rows or
    (B, …); ``attrs`` the per-layer attributions. ``endpoints``: (p_ŷ(x), p_ŷ(r̄)) per sample (B,) where the caller
    already has them from passes whose rows round as these would (the audit's batch forward: ``AttributionContext.
    endpoints``), instead of the two head passes here."""
    n = len(inputs[0])
    column = target.reshape(n, 1)
    with torch.no_grad():
        if endpoints is not None:
            end_sum, start_sum = endpoints
        else:
            start = [torch.cat([b] * n) if n > 1 and len(b) == 1 else b for b in baselines]  # as Captum tensorises
            start_sum, end_sum = (forward(*fs).gather(1, column).reshape(n, -1).sum(1) for fs in (start, inputs))
        attr_sum = 0
        for a in attrs:  # Python's sum over a sample's layers: 0 + s_1 + … + s_L
            attr_sum = attr_sum + a.reshape(n, -1).sum(1)
        return attr_sum - (end_sum - start_sum)


def _leaves(feats: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return tuple(f.detach().float().requires_grad_(True) for f in feats)


def _joined_leaf(joined: Joined, feats: Sequence[Tensor]) -> Tensor:
    return joined.join([f.detach().float() for f in feats]).requires_grad_(True)


def _baselines(baseline: Sequence[Tensor] | None, inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """r̄_i as (1, d_i) rows, broadcast by Captum; zeros where no reference is given."""
    if baseline is None:
        return tuple(torch.zeros_like(x[:1]) for x in inputs)
    if len(baseline) != len(inputs):
        raise LayaError(f"the reference has {len(baseline)} layers but the features have {len(inputs)}")
    return tuple(b.to(x.device, x.dtype).reshape(1, *x.shape[1:]) for b, x in zip(baseline, inputs))


def _per_sample_chunks(fn, feats, target, size: int, return_delta: bool):
    """``fn(feats, target)`` over chunks of ``size`` samples, concatenated (Captum's own chunks never go below one
    row per sample)."""
    parts = [fn([f[s : s + size] for f in feats], target[s : s + size]) for s in range(0, len(target), size)]
    if return_delta:
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return torch.cat(parts)


def integrated_gradients(
    head: nn.Module,
    feats: Sequence[Tensor],
    target: Tensor,
    baseline: Sequence[Tensor] | None = None,
    n_steps: int = 32,
    internal_batch_size: int | None = None,
    reduce: str = "sum",
    return_delta: bool = False,
    endpoints: tuple[Tensor, Tensor] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Captum IntegratedGradients of p_ŷ over (r_1 … r_L) from the baseline r̄.

    One Captum call attributes all layers, handed to it as one joined input (``Joined``: the same numbers as the
    L inputs separately, in fewer operations). ``internal_batch_size`` bounds memory: at most that many rows per
    head pass (Captum's own option; batches larger than it are first split into chunks of that many samples).
    With ``return_delta``, also returns Captum's convergence delta per sample, Σ attributions − (p_ŷ(x) − p_ŷ(r̄)),
    by Captum's ``compute_convergence_delta`` on the per-layer attributions (so the sum runs layer by layer, as
    for L inputs); ``endpoints``: its p_ŷ(x) and p_ŷ(r̄) per sample where already known (``convergence_delta``).
    """
    from captum.attr import IntegratedGradients

    if internal_batch_size is not None and len(target) > internal_batch_size:
        one = lambda f, t: integrated_gradients(  # noqa: E731
            head, f, t, baseline, n_steps, internal_batch_size, reduce, return_delta
        )
        return _per_sample_chunks(one, feats, target, internal_batch_size, return_delta)
    joined = Joined(feats)
    inputs = tuple(f.detach().float() for f in feats)
    baselines = _baselines(baseline, inputs)
    out = IntegratedGradients(batch_total(head, joined)).attribute(
        _joined_leaf(joined, inputs),
        baselines=joined.join(baselines),
        additional_forward_args=(target,),
        n_steps=n_steps,
        internal_batch_size=internal_batch_size,
    )
    attrs = joined.views(out)
    scores = reduce_layers(attrs, reduce).detach()
    if not return_delta:
        return scores
    return scores, convergence_delta(probability_forward(head, joined), attrs, baselines, inputs, target, endpoints)


def attribution_patching(
    head: nn.Module, feats: Sequence[Tensor], target: Tensor, baseline: Sequence[Tensor] | None, reduce: str = "sum"
) -> Tensor:
    """Attribution patching (AtP; Kramár et al. 2024): (r_i − r̄_i) ⊙ ∂p_ŷ/∂r_i, the first-order estimate of what
    replacing r_i by the removal's reference does, reduced per layer. The gradients are Captum's (Saliency
    without the absolute value, on the joined input: ``Joined``); ``baseline`` None is the zero reference."""
    from captum.attr import Saliency

    joined = Joined(feats)
    inputs = _leaves(feats)
    grads = joined.views(
        Saliency(batch_total(head, joined)).attribute(
            _joined_leaf(joined, inputs), additional_forward_args=(target,), abs=False
        )
    )
    refs = _baselines(baseline, inputs)
    return reduce_layers([(x.detach() - r) * g for x, r, g in zip(inputs, refs, grads)], reduce).detach()


def gradient_x_activation(head: nn.Module, feats: Sequence[Tensor], target: Tensor, reduce: str = "sum") -> Tensor:
    """Captum InputXGradient on (r_1 … r_L), joined into one input (``Joined``): r_i ⊙ ∂p_ŷ/∂r_i, reduced per
    layer."""
    from captum.attr import InputXGradient

    joined = Joined(feats)
    attrs = InputXGradient(batch_total(head, joined)).attribute(
        _joined_leaf(joined, feats), additional_forward_args=(target,)
    )
    return reduce_layers(joined.views(attrs), reduce).detach()


def saliency(head: nn.Module, feats: Sequence[Tensor], target: Tensor, reduce: str = "sum") -> Tensor:
    """Captum Saliency (abs=True) on the joined input (``Joined``): |∂p_ŷ/∂r_i|, summed per layer (``l2`` gives
    its norm)."""
    from captum.attr import Saliency

    joined = Joined(feats)
    attrs = Saliency(batch_total(head, joined)).attribute(
        _joined_leaf(joined, feats), additional_forward_args=(target,), abs=True
    )
    return reduce_layers(joined.views(attrs), reduce).detach()


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
    endpoints: tuple[Tensor, Tensor] | None = None  # (p_ŷ(x), p_ŷ(r̄)) per sample, known: IG's convergence delta
    alpha: Tensor | None = None  # the head's α on these features, known from its forward: ``laya``'s scores
