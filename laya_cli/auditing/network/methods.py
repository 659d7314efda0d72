"""Captum's layer attributions at network scope (wrapped, never re-implemented), on a ``patching.NetworkScope``:

ig        Captum ``LayerIntegratedGradients`` per tapped layer, layer baseline = the reference
          activation; on a chain it runs on the suffix of the network after that layer.
gradxact  h_i ⊙ the layer gradients dp_ŷ/dh_i of Captum's ``LayerGradientXActivation`` (``multiply_by_inputs=False``)
          on all tapped modules in one forward and backward.
atp       (h_i − the removal's fill) ⊙ the layer gradients of the same Captum call.
saliency  |the layer gradients of the same Captum call|, summed.

The audit's batch takes the taps, the by-input removals' inputs, the pooled r_i, the head's output and ŷ from that
same Captum forward where a gradient method is asked (``taps_and_gradients``): one forward of the network per batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ...runtime.progress import ticks, within
from ..ig_steps import NETWORK_FIRST_STEPS, adaptive_ig
from ..methods import REDUCTIONS


class _Blend(nn.Module):
    """b·h + (1 − b)·h̄ per row: h for b = 1, the reference h̄ for b = 0. The point Captum's
    LayerIntegratedGradients attributes to on the full model, so that its layer baseline is h̄."""

    def forward(self, h: Tensor, b: Tensor, ref: Tensor) -> Tensor:
        b = b.view(-1, *[1] * (h.dim() - 1)).to(h.dtype)
        return b * h + (1 - b) * ref


class TapsAndGradients(NamedTuple):
    """A batch's one forward and backward (``LayerAttributions.taps_and_gradients``)."""

    hs: list[Tensor]  # the taps' activations
    feats: list[Tensor]  # pooled: the head's r_i
    out: Any  # the head's output (``HeadOutput``)
    target: Tensor  # ŷ: the head's prediction, or the labels given
    grads: list[Tensor]  # dp_ŷ/dh_i


def _first(a):
    return a[0] if isinstance(a, (tuple, list)) else a


def _reduced_rows(a: Tensor, reduce: str) -> Tensor:
    """``REDUCTIONS[reduce]`` of each row of ``a`` flattened: a contiguous tensor's sum taken over its trailing
    dimensions as they lie, which the reduction merges into one as ``flatten`` would (the same sum, one operation
    less: no view)."""
    if reduce == "sum" and a.ndim > 2 and a.is_contiguous():
        return a.sum(tuple(range(1, a.ndim)))
    return REDUCTIONS[reduce](a.flatten(1))


def _detached(t: Tensor) -> Tensor:
    """``t`` out of autograd: itself where it is already (Captum's gradients, made without a graph), as
    ``detach`` would give it (one operation less)."""
    return t.detach() if t.requires_grad else t


class LayerAttributions:
    """Captum's layer methods of a ``NetworkScope`` (its mixin: they read its ``backbone``, ``fill``, ``probs``,
    ``pooled`` and ``prefix``)."""

    def integrated_gradients(
        self,
        x: Tensor,
        hs: Sequence[Tensor],
        feats: Sequence[Tensor],
        target: Tensor,
        n_steps: int = 32,
        internal_batch_size: int | None = None,
        reduce: str = "sum",
    ) -> Tensor:
        """Captum ``LayerIntegratedGradients`` of p_ŷ per tapped layer, layer baseline = the reference
        activation, reduced per layer: (B, L).

        On a chain the attributed point is tap i's activation fed to the rest of the network
        (``continue_from``): Captum's steps run only layers i+1..L and the head; the earlier taps'
        r_j are fixed (passed as Captum's additional forward arguments, expanded with the steps).
        Elsewhere: ``blended_layer_ig`` (Captum over the full model, one call per layer)."""
        if not self.prefix:
            return blended_layer_ig(self, x, target, None, n_steps, internal_batch_size, reduce)
        return torch.stack(
            [
                self._layer_ig(i, h, feats[:i], target, n_steps, internal_batch_size, reduce)[0]
                for i, h in within(list(enumerate(hs)))  # progress layer by layer inside a long batch
            ],
            dim=1,
        )

    def adaptive_integrated_gradients(
        self,
        x: Tensor,
        hs: Sequence[Tensor],
        feats: Sequence[Tensor],
        target: Tensor,
        effects: Tensor,
        max_steps: int = 32,
        tol: float = 0.0,
        internal_batch_size: int | None = None,
        reduce: str = "sum",
    ) -> tuple[Tensor, Tensor]:
        """``integrated_gradients`` with each (sample, layer)'s steps chosen from its convergence delta
        (``ig_steps.adaptive_ig``): (B, L) scores and (B, L) steps used. ``effects``: (B, L) the total
        effects Δ_i, what layer i's attributions add up to. Backbones without ``continue_from`` (and
        ``tol`` 0) take ``max_steps`` throughout."""
        if not self.prefix or tol == 0:
            scores = self.integrated_gradients(x, hs, feats, target, max_steps, internal_batch_size, reduce)
            return scores, torch.full(scores.shape, max_steps, dtype=torch.long)
        scores, steps = [], []
        for i, h in within(list(enumerate(hs))):  # progress layer by layer inside a long batch

            def attribute(rows: Tensor, n_steps: int, i=i, h=h):
                on = rows.to(h.device)
                before = [f[on] for f in feats[:i]]
                with self.backbone.batch_rows(rows):  # a text model's mask and replayed arguments: these rows'
                    return self._layer_ig(i, h[on], before, target[on], n_steps, internal_batch_size, reduce, on)

            a, _, used = adaptive_ig(attribute, effects[:, i], max_steps, tol, NETWORK_FIRST_STEPS)
            scores.append(a)
            steps.append(used)
        return torch.stack(scores, dim=1), torch.stack(steps, dim=1)

    def _layer_ig(
        self,
        i: int,
        h: Tensor,
        before: Sequence[Tensor],
        target: Tensor,
        n_steps: int,
        internal_batch_size,
        reduce,
        rows: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Captum's ``LayerIntegratedGradients`` at tap i of a chain: (B,) layer scores and (B,) convergence deltas.
        The attributed point is tap i's activation fed to the rest of the network (``continue_from``), so
        Captum's steps run only layers i+1..L and the head; ``before`` (the earlier taps' r_j) stays fixed."""
        from captum.attr import LayerIntegratedGradients

        point = nn.Identity()

        def forward(hi, *before):
            hi = point(hi)
            return self.probs(
                [*before, self.backbone.pool_tap(i, hi), *self.pooled(self.backbone.continue_from(i, hi), i + 1)]
            )

        # Captum runs the steps in passes of internal_batch_size rows (one without it): progress moves pass by pass
        passes = math.ceil(len(h) * n_steps / internal_batch_size) if internal_batch_size else 1
        with ticks(passes) as tick:

            def counted(*args):
                out = forward(*args)
                tick()
                return out

            attr, delta = LayerIntegratedGradients(counted, point).attribute(
                h.detach(),
                baselines=self.fill(i, h, rows).contiguous(),
                target=target,
                additional_forward_args=tuple(f.detach() for f in before) or None,
                n_steps=n_steps,
                internal_batch_size=internal_batch_size,
                return_convergence_delta=True,
            )
        return REDUCTIONS[reduce](_first(attr).flatten(1)).detach(), delta.detach()

    def taps_and_gradients(self, x: Tensor, labels: Tensor | None = None) -> TapsAndGradients:
        """The batch's taps (and, for a by-input removal, their inputs: ``inputs``), their pooled r_i, the head's
        output and ŷ, with Captum's layer gradients dp_ŷ/dh_i (``layer_gradients(..., multiply=False)``) from one
        forward and backward of the full model. The forward Captum runs is the batch's own pass (``taps``) with
        every tap through a Captum point (``tap_points``); it keeps what it computed (detached) and returns Σ_b p_ŷ,
        ŷ picked from its own logits (``labels``: the labels instead) and p_ŷ as Captum would select it, so Captum
        needs no target up front (the gradient of several outputs is that of their sum: the same layer gradients).
        The same bits as ``activations`` then ``layer_gradients`` where ``one_pass`` holds."""
        from captum.attr import LayerGradientXActivation

        kept = {}

        def forward(images):
            hs = self.taps(images)
            feats = self.pooled(hs)
            out = self.head(feats)
            target = out.logits.detach().argmax(-1) if labels is None else labels
            kept.update(hs=[h.detach() for h in hs], feats=[f.detach() for f in feats], target=target)
            kept["out"] = type(out)(*(None if t is None else t.detach() for t in out))
            # Captum's selection of a (B,) target (common._select_targets): a gather of the (B, C) probabilities;
            # summed over the batch, one output: Captum's gradient of its B outputs (``torch.autograd.grad`` of their
            # unbind) is the gradient of their sum too, with one seed of 1 instead of B (the same backward after it)
            return torch.gather(torch.softmax(out.logits, dim=-1), 1, target.reshape(len(target), 1)).sum(0)

        with self.backbone.tap_points() as points:
            grads = LayerGradientXActivation(forward, points, multiply_by_inputs=False).attribute(
                x.detach().requires_grad_(x.is_floating_point())
            )
        return TapsAndGradients(grads=[_detached(_first(g)) for g in grads], **kept)

    def layer_gradients(self, x: Tensor, target: Tensor, multiply: bool = True) -> list[Tensor]:
        """Captum ``LayerGradientXActivation`` on every tap (the ``tap_points`` its output passes through) in one
        forward and backward of the full model (``multiply=False``: the layer gradients): one tensor per tap."""
        from captum.attr import LayerGradientXActivation

        forward = lambda images: self.probs(self.pooled(self.backbone.patched_activations(images)))
        # Images that require grad: with a frozen backbone the tap outputs are otherwise outside autograd (token
        # ids cannot: a text backbone's embeddings output requires grad instead, backbones/hf.py).
        with self.backbone.tap_points() as points:  # one module per tap: a layer called at several depths too
            attrs = LayerGradientXActivation(forward, points, multiply_by_inputs=multiply).attribute(
                x.detach().requires_grad_(x.is_floating_point()), target=target
            )
        return [_first(a).detach() for a in attrs]

    def gradient_x_activation(self, x: Tensor, target: Tensor, reduce: str = "sum") -> Tensor:
        return torch.stack([REDUCTIONS[reduce](a.flatten(1)) for a in self.layer_gradients(x, target)], dim=1)

    def attribution_patching(self, x: Tensor, hs: Sequence[Tensor], target: Tensor, reduce: str = "sum") -> Tensor:
        """AtP at network scope: (h_i − its removal's fill) ⊙ dp_ŷ/dh_i, the total derivative (Captum's layer
        gradients): the first-order estimate of the patch effect Δᴺ_i, with the ablation's own reference."""
        grads = self.layer_gradients(x, target, multiply=False)
        return torch.stack(
            [REDUCTIONS[reduce](((h - self.fill(i, h)) * g).flatten(1)) for i, (h, g) in enumerate(zip(hs, grads))],
            dim=1,
        )

    def from_gradients(self, part, hs: Sequence[Tensor], grads: Sequence[Tensor], reduce: str = "sum") -> Tensor:
        """(B, L) scores of a gradient method from the layer gradients ``grads`` (``layer_gradients(...,
        multiply=False)``) and the taps ``hs`` of the same batch; ``part`` (the method's record's
        ``from_gradients``: Grad×Act g·h, what Captum's LayerGradientXActivation multiplies; AtP g·(h − fill);
        saliency |g|) makes tap i's per-feature attribution. One Captum pass serves all three."""
        return torch.stack(
            [_reduced_rows(part(self, i, h, g.to(h.dtype)), reduce) for i, (h, g) in enumerate(zip(hs, grads))], dim=1
        )

    def saliency(self, x: Tensor, target: Tensor, reduce: str = "sum") -> Tensor:
        grads = self.layer_gradients(x, target, multiply=False)
        return torch.stack([REDUCTIONS[reduce](g.abs().flatten(1)) for g in grads], dim=1)


def blended_layer_ig(
    scope,
    x: Tensor,
    target: Tensor,
    layers: Sequence[int] | None = None,
    n_steps: int = 32,
    internal_batch_size: int | None = None,
    reduce: str = "sum",
) -> Tensor:
    """Captum's straightforward route: one ``LayerIntegratedGradients`` per tapped layer over the
    full model (images → backbone → head → p_ŷ), every step a full forward and backward pass.
    ``scope``: the NetworkScope whose removal (and last batch's inputs, which must be ``x``'s) it patches with.

    Captum takes a layer's baseline from the *input* baseline; to make it the reference
    activation h̄_i, tap i's output goes through a ``_Blend`` point b·h_i + (1 − b)·h̄_i whose
    switch b is a second model input (1 for the input, 0 for the baseline; the images are the
    same), and Captum attributes to that point. (B, len(layers))."""
    from captum.attr import LayerIntegratedGradients

    backbone = scope.backbone
    layers = range(scope.num_layers) if layers is None else layers
    on, off = torch.ones(len(x), device=x.device), torch.zeros(len(x), device=x.device)
    scores = []
    for i in within(list(layers)):  # progress layer by layer inside a long batch
        blend = _Blend()

        def forward(images, b, i=i, blend=blend):
            patch = lambda out: blend(out, b, scope.fill(i, out))
            return scope.probs(scope.pooled(backbone.patched_activations(images, i, patch=patch)))

        attr = LayerIntegratedGradients(forward, blend).attribute(
            (x, on), baselines=(x, off), target=target, n_steps=n_steps, internal_batch_size=internal_batch_size
        )
        scores.append(REDUCTIONS[reduce](_first(attr).flatten(1)).detach())
    return torch.stack(scores, dim=1)
