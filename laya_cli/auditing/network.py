"""Network scope: total layer effects, patched inside the backbone (docs/metrics.md, "Two scopes").

At head scope (``auditing.run_audit``) layer i is removed where the head reads it: r_i is replaced
and every later layer still sees the original h_i — layer i's *direct* effect. Here layer i's
output is replaced *inside the backbone* by a reference activation (the training mean of the
unpooled activation, or zero) and the rest of the network runs on: its *total* effect, direct and
through every later layer (activation patching, as in causal tracing).

Cost: never recompute what a patch cannot change. The taps' activations are computed once per
batch; for backbones whose taps form a chain (``TappedBackbone.can_continue``: our mlp/cnn, timm
ViT/DeiT/Mixer blocks, ResNet stages, …) a patched pass and every IG step run only the layers
after the patched one (``continue_from``). Other backbones fall back to full forward passes with a
replacing hook (``patched_activations``).

Methods at network scope (Captum wrapped, never re-implemented):
  ig        Captum ``LayerIntegratedGradients`` per tapped layer, layer baseline = the reference
            activation; on a chain it runs on the suffix of the network after that layer.
  gradxact  Captum ``LayerGradientXActivation`` on all tapped modules in one pass.
  saliency  the same Captum call with ``multiply_by_inputs=False`` (layer gradients), |·| summed.
  laya, contrib, global, random: the same scores as at head scope (α and contrib are direct-effect
            scores by construction), scored against the total effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from ..backbones.adapters import stack_copies
from ..data.images import image_batches
from ..features.extraction import tap_means, to_float_images
from ..runtime.config import HEAD_ABLATIONS, NETWORK_ABLATIONS, AuditSettings, check_choice
from ..runtime.device import to_device
from ..runtime.errors import LayaError
from ..runtime.progress import log
from .ig_steps import NETWORK_FIRST_STEPS, adaptive_ig, steps_summary
from .intervals import network_intervals
from .methods import (
    METHODS,
    REDUCTIONS,
    AttributionContext,
    global_weights,
    laya_attention,
)
from .metrics import (
    accuracy,
    degenerate_effects,
    deletion_at_1,
    head_ablation,
    lolo_effects,
    nan_summary,
    normalised_deletion,
    spearman_rows,
    target_probability,
    tie_undefined,
)
from .names import NETWORK_METRICS
from .results import AuditResult, MethodScores, ties_block
from .run import record_collapse, run_audit
from .scaffold import AuditPlan, Rows

BY_INPUT = ("bypass", "mean-update")  # removals that put a block's own input in place of its output
SCOPED_METHODS = (
    "ig",
    "gradxact",
    "atp",
    "saliency",
)  # computed anew at network scope; the others are the head's scores
# The MethodScores keys a network-scope audit computes (its JSON has only these; the deeper metrics of the head
# scope — AOPC, sufficiency, completeness, randomisation — are not computed here: docs/metrics.md).
NETWORK_KEYS = (
    "ig_steps",
    "faithfulness",
    "faithfulness_std",
    "undefined",
    "defined",
    "deletion@1",
    "deletion@1_oracle",
    "deletion@1_random",
    "deletion@1_normalised",
    "available",
    "note",
    "degenerate",
    "undefined_by_ties",
    "ci_level",  # --ci: the bootstrap intervals (auditing/intervals.py), as at head scope
    "ci",
    "vs_laya",
)
assert set(NETWORK_METRICS) <= set(NETWORK_KEYS)


# --------------------------------------------------------------------------- the reference activation


def network_reference(
    model, ablation: str = "mean", device: str = "cpu", use_cache: bool = True
) -> list[Tensor] | None:
    """What a patched layer is replaced by, besides the batch's own inputs: ``None`` for ``zero`` and ``bypass``
    (tap i's output := its input); for ``mean`` the training mean of each tap's unpooled activation — from the
    checkpoint (``tap_reference``), else computed once over the checkpoint's training split and cached beside
    the features (keyed like them); for ``mean-update`` the training mean of each block's update (output − input),
    computed and cached the same way."""
    check_network_ablation(ablation)
    if ablation in ("zero", "bypass"):
        return None
    stored = model.checkpoint.get("tap_reference") if ablation == "mean" else None
    if stored is not None:
        return [t.float() for t in stored]
    return _training_means(model, ablation, device, use_cache)


def _training_means(model, ablation: str, device: str, use_cache: bool) -> list[Tensor]:
    """``tap_means`` of the outputs (``mean``) or of the updates (``mean-update``) over the training split, cached."""
    from ..data.datasets import USER_DATASET
    from ..features.cache import FeatureCache, feature_key
    from ..features.extraction import LayerFeatures, tap_outputs, tap_updates
    from ..model.evaldata import model_dataset
    from ..runtime.config import digest
    from ..runtime.distributed import is_main

    what = "tap means" if ablation == "mean" else "mean updates"
    if model.checkpoint.get("dataset", {}).get("name") == USER_DATASET:
        raise LayaError(
            f"this model stores no {what} and was trained from your own DataLoader, which laya cannot reload to "
            'compute them: audit the network scope with --ablation zero or bypass (ablation="bypass")'
        )
    req, data = model_dataset(model)
    train = data.train
    model.backbone.to(device)
    cache = FeatureCache() if use_cache else None
    key = digest(
        features=feature_key(model.backbone, data.identity, "train", req.seed, len(train), device),
        what="tap-means" if ablation == "mean" else "tap-update-means",
    )
    if cache is not None:
        hit = cache.load(key)
        if hit is not None and len(hit.feats) == len(model.layer_names):
            log(f"reusing cached {what} ({cache.path(key)})")
            return [f[0] for f in hit.feats]
    why = "the checkpoint stores no tap means (older laya, or a frozen backbone)" if ablation == "mean" else what
    log(f"{why}: computing them over {len(train):,} training samples once")
    of = tap_outputs if ablation == "mean" else tap_updates
    means = tap_means(model.backbone, train.images, device=device, description=f"{what} (train)", of=of)
    if cache is not None and is_main():  # one row per layer, stored as a feature entry
        cache.save(key, LayerFeatures([m.unsqueeze(0) for m in means], torch.zeros(1, dtype=torch.long)))
    return means


def check_network_ablation(ablation: str) -> str:
    """``ablation`` if the network scope can remove a layer that way; else one line (mask changes only the head)."""
    if ablation in HEAD_ABLATIONS and ablation not in NETWORK_ABLATIONS:
        raise LayaError(
            f"--scope network patches activations inside the backbone: use --ablation "
            f"{', '.join(NETWORK_ABLATIONS)} (--ablation {ablation} only changes the head)"
        )
    return check_choice("--ablation", ablation, NETWORK_ABLATIONS)


GRADIENT_METHODS = ("ig", "gradxact", "atp", "saliency")  # network scope: gradients from p_ŷ back to each tap


def check_network_scope(model, ablation: str, methods: Sequence[str] = ()) -> None:
    """Fail before any work: an ablation that has no network-scope meaning, taps that cannot be patched (not
    modules of the model), or taps that gradient ``methods`` cannot reach."""
    check_network_ablation(ablation)
    model.backbone.tap_modules()
    if ablation in BY_INPUT:  # every tapped block's output must have its input's shape: one line, before any work
        with torch.no_grad():
            model.backbone.eval().activations_and_inputs(model.backbone.probe_input())
    if any(m in GRADIENT_METHODS for m in methods):
        check_gradients_reach_taps(model.backbone)


def check_gradients_reach_taps(backbone) -> None:
    """A model that computes some layers under ``torch.no_grad`` inside its own forward (HRM runs all but its last
    recurrent cycle so) gives those taps no gradient: network-scope IG, Grad×Act and AtP cannot attribute to them.
    Refused in one line on a probe batch rather than failing deep inside Captum."""
    x = backbone.probe_input()
    with torch.enable_grad():
        hs = backbone.eval().activations(x.detach().requires_grad_(x.is_floating_point()))
    cut = [name for name, h in zip(backbone.layer_names, hs) if not h.requires_grad]
    if cut:
        raise LayaError(
            f"the model computes {', '.join(cut[:3])}{' …' if len(cut) > 3 else ''} without gradients (under "
            "torch.no_grad inside its forward): network-scope gradient methods cannot reach them; audit with "
            "--scope head, or --compare without ig, gradxact, atp and saliency"
        )


# --------------------------------------------------------------------------- patched passes


class _Blend(nn.Module):
    """b·h + (1 − b)·h̄ per row: h for b = 1, the reference h̄ for b = 0. The point Captum's
    LayerIntegratedGradients attributes to on the full model, so that its layer baseline is h̄."""

    def forward(self, h: Tensor, b: Tensor, ref: Tensor) -> Tensor:
        b = b.view(-1, *[1] * (h.dim() - 1)).to(h.dtype)
        return b * h + (1 - b) * ref


def _first(a):
    return a[0] if isinstance(a, (tuple, list)) else a


class NetworkScope:
    """Patched passes and Captum's layer attributions for one tapped backbone and head.

    ``reference``: one unpooled activation per tap (no batch dimension), or None for zeros.
    ``prefix``: use ``continue_from`` (default: when the backbone can continue); False forces full
    passes with a replacing hook (what non-chain backbones get).
    ``ablation``: how tap i is removed (``NETWORK_ABLATIONS``): its output := ``reference[i]`` (mean, zero), its
    input (bypass), or its input + ``reference[i]`` (mean-update: ``reference`` then holds the mean updates). The
    inputs are the last batch's, recorded by ``activations``.
    """

    def __init__(
        self,
        backbone,
        head: nn.Module,
        reference: Sequence[Tensor] | None = None,
        prefix: bool | None = None,
        ablation: str = "mean",
    ):
        self.backbone, self.head = backbone, head
        self.ablation = check_network_ablation(ablation)
        self.inputs: list[Tensor] = []  # by-input removals: each tap's input on the last batch
        self.modules = backbone.tap_modules()  # a tap that is not a module cannot be patched: one line
        n = len(backbone.layer_names)
        if reference is not None and len(reference) != n:
            raise LayaError(f"the network reference has {len(reference)} layers but the backbone taps {n}")
        self.reference = None if reference is None else [r.float() for r in reference]
        self.prefix = backbone.can_continue if prefix is None else bool(prefix)
        if self.prefix and not backbone.can_continue:
            raise LayaError("this backbone cannot continue from a tap (see docs/backbones.md)")

    @property
    def num_layers(self) -> int:
        return len(self.modules)

    def fill(self, i: int, h: Tensor, rows: Tensor | None = None) -> Tensor:
        """What tap i's output ``h`` is replaced by, shaped like it: the reference activation, or (by-input
        removals) the tap's input on the last batch — its ``rows`` only, or repeated as Captum stacks copies."""
        given = None
        if self.ablation in BY_INPUT:
            if not self.inputs:
                raise LayaError(f"--ablation {self.ablation} needs the batch's activations first")
            given = self.inputs[i] if rows is None else self.inputs[i][rows.to(self.inputs[i].device)]
            given = stack_copies(given, len(h) // len(given)).to(h.dtype)
            if self.ablation == "bypass":
                return given
        if self.reference is None:
            return torch.zeros_like(h)
        ref = self._reference(i, h)
        return ref if given is None else given + ref

    def _reference(self, i: int, h: Tensor) -> Tensor:
        """``reference[i]`` expanded to the batch ``h`` (a text batch cut after its longest: its first positions)."""
        ref = self.reference[i].to(h.device, h.dtype)
        cut = h.ndim >= 3 and ref.ndim == h.ndim - 1 and ref.shape[0] > h.shape[1] and ref.shape[1:] == h.shape[2:]
        if cut:  # a batch of texts cut after its longest (per position: B×L×d, or B×L×streams×d as DeepSeek-V4's)
            ref = ref[: h.shape[1]]
        if tuple(ref.shape) != tuple(h.shape[1:]):
            raise LayaError(
                f"the mean activation of layer {self.backbone.layer_names[i]} has shape "
                f"{tuple(ref.shape)} but the model gives {tuple(h.shape[1:])} (another input size?)"
            )
        return ref.unsqueeze(0).expand_as(h)

    def pooled(self, hs: Sequence[Tensor], first: int = 0) -> list[Tensor]:
        return [self.backbone.pool_tap(first + j, h) for j, h in enumerate(hs)]

    def probs(self, feats: Sequence[Tensor]) -> Tensor:
        return torch.softmax(self.head(list(feats)).logits, dim=-1)

    @torch.no_grad()
    def activations(self, x: Tensor) -> list[Tensor]:
        """Raw tap activations h_1..h_L of a batch of float images (one pass); the taps' inputs are kept too
        when a removal needs them."""
        if self.ablation not in BY_INPUT:
            return self.backbone.activations(x)
        hs, self.inputs = self.backbone.activations_and_inputs(x)
        return hs

    def later(self, i: int, h: Tensor, x: Tensor) -> list[Tensor]:
        """h_{i+1}..h_L with tap i's output = ``h``: only the later layers on a chain, else a full pass."""
        if self.prefix:
            return self.backbone.continue_from(i, h)
        return self.backbone.patched_activations(x, i, h)[i + 1 :]

    @torch.no_grad()
    def effects(self, x: Tensor, hs: Sequence[Tensor], feats: Sequence[Tensor], target: Tensor) -> Tensor:
        """Total effects Δ_i = p_ŷ(x) − p_ŷ(x with tap i patched to the reference inside the network): (B, L).

        One head pass intact plus, per layer, the layers after it (a chain) or a full pass."""
        feats = list(feats)
        base = target_probability(self.head(feats).logits, target)
        patched = []
        for i, h in enumerate(hs):
            fill = self.fill(i, h)
            rest = self.pooled(self.later(i, fill, x), i + 1)
            patched.append(
                target_probability(self.head([*feats[:i], self.backbone.pool_tap(i, fill), *rest]).logits, target)
            )
        return base.unsqueeze(1) - torch.stack(patched, dim=1)

    # ------------------------------------------------------------------ Captum's layer methods

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
        Elsewhere: ``full_model_layer_ig`` (Captum over the full model, one call per layer)."""
        if not self.prefix:
            return full_model_layer_ig(
                self.backbone,
                self.head,
                x,
                target,
                self.reference,
                n_steps=n_steps,
                internal_batch_size=internal_batch_size,
                reduce=reduce,
                scope=self,
            )
        return torch.stack(
            [
                self._layer_ig(i, h, feats[:i], target, n_steps, internal_batch_size, reduce)[0]
                for i, h in enumerate(hs)
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
        for i, h in enumerate(hs):

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

        attr, delta = LayerIntegratedGradients(forward, point).attribute(
            h.detach(),
            baselines=self.fill(i, h, rows).contiguous(),
            target=target,
            additional_forward_args=tuple(f.detach() for f in before) or None,
            n_steps=n_steps,
            internal_batch_size=internal_batch_size,
            return_convergence_delta=True,
        )
        return REDUCTIONS[reduce](_first(attr).flatten(1)).detach(), delta.detach()

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

    def saliency(self, x: Tensor, target: Tensor, reduce: str = "sum") -> Tensor:
        grads = self.layer_gradients(x, target, multiply=False)
        return torch.stack([REDUCTIONS[reduce](g.abs().flatten(1)) for g in grads], dim=1)


def full_model_layer_ig(
    backbone,
    head: nn.Module,
    x: Tensor,
    target: Tensor,
    reference: Sequence[Tensor] | None,
    layers: Sequence[int] | None = None,
    n_steps: int = 32,
    internal_batch_size: int | None = None,
    reduce: str = "sum",
    scope: NetworkScope | None = None,
) -> Tensor:
    """Captum's straightforward route: one ``LayerIntegratedGradients`` per tapped layer over the
    full model (images → backbone → head → p_ŷ), every step a full forward and backward pass.
    ``scope``: the NetworkScope whose removal (and last batch's inputs, which must be ``x``'s) it patches with.

    Captum takes a layer's baseline from the *input* baseline; to make it the reference
    activation h̄_i, tap i's output goes through a ``_Blend`` point b·h_i + (1 − b)·h̄_i whose
    switch b is a second model input (1 for the input, 0 for the baseline; the images are the
    same), and Captum attributes to that point. (B, len(layers))."""
    from captum.attr import LayerIntegratedGradients

    scope = scope or NetworkScope(backbone, head, reference, prefix=False)
    layers = range(scope.num_layers) if layers is None else layers
    on, off = torch.ones(len(x), device=x.device), torch.zeros(len(x), device=x.device)
    scores = []
    for i in layers:
        blend = _Blend()

        def forward(images, b, i=i, blend=blend):
            patch = lambda out: blend(out, b, scope.fill(i, out))
            return scope.probs(scope.pooled(backbone.patched_activations(images, i, patch=patch)))

        attr = LayerIntegratedGradients(forward, blend).attribute(
            (x, on), baselines=(x, off), target=target, n_steps=n_steps, internal_batch_size=internal_batch_size
        )
        scores.append(REDUCTIONS[reduce](_first(attr).flatten(1)).detach())
    return torch.stack(scores, dim=1)


# --------------------------------------------------------------------------- results


@dataclass
class ScopeComparison:
    """--scope both: per method, Spearman ρ between its head-scope and network-scope scores (mean
    over samples where both vary); per layer, mean Δ at each scope and their ratio (``direct_share``: direct ÷
    total, a ratio of means, not bounded by 1)."""

    methods: dict[str, dict]  # name -> {"spearman", "spearman_std", "defined", "undefined"}
    layers: dict[str, dict]  # name -> {"delta_head", "delta_network", "direct_share"}

    def to_dict(self) -> dict:
        return {"methods": self.methods, "layers": self.layers}


@dataclass
class NetworkResult:
    """The network-scope results: the same per-method shape as the head scope's ``methods``."""

    methods: dict
    patched: str  # "prefix" (continue_from) or "full" (hooks)
    reference: str  # "mean" or "zero"
    comparison: ScopeComparison | None = None
    notes: list[str] = field(default_factory=list)
    ties: dict | None = None  # the tie tolerance and what it made undefined (results.ties_block)

    def to_dict(self) -> dict:
        out = {
            "methods": {
                m: {k: v for k, v in s.to_dict().items() if k in NETWORK_KEYS} for m, s in self.methods.items()
            },
            "patched": self.patched,
            "reference": self.reference,
            "notes": self.notes,
        }
        if self.comparison is not None:
            out["scopes"] = self.comparison.to_dict()
        if self.ties is not None:
            out["ties"] = self.ties
        return out


# --------------------------------------------------------------------------- the run


def _method_scores(plan: AuditPlan, rho: dict, d1: dict, tie: dict, common: dict) -> dict[str, MethodScores]:
    """Faithfulness and Deletion@1 per method from the per-sample rows, as at head scope (built here,
    with MethodScores' own fields, so that the head scope's summaries can grow without touching this).
    ``common["degenerate"]``: the samples whose total effects vary in at most one layer; their ρ is
    undefined, as at head scope; ``tie``: per method, the samples undefined only because of the tie tolerance.
    The deeper metrics keep their defaults (not computed here; not in the JSON)."""
    nan = float("nan")
    mean = lambda t: t.double().mean().item() if len(t) else nan
    oracle, random, degenerate = mean(common["oracle"]), mean(common["random"]), common["degenerate"]
    n, n_degenerate = len(common["oracle"]), int(degenerate.sum())
    out = {}
    for m in plan.methods:
        if plan.reasons[m]:
            out[m] = MethodScores.unavailable(plan.reasons[m], n, oracle=oracle, random=random, degenerate=n_degenerate)
            continue
        faithfulness, std, defined, undefined = nan_summary(rho[m].masked_fill(degenerate, nan))
        d = mean(d1[m])
        out[m] = MethodScores(
            faithfulness=faithfulness,
            faithfulness_std=std,
            defined=defined,
            undefined=undefined,
            deletion_at_1=d,
            oracle=oracle,
            random=random,
            normalised=normalised_deletion(d, oracle, random),
            degenerate=n_degenerate,
            undefined_by_ties=int(tie[m].sum()),
        )
    return out


def _summary(values: Tensor) -> dict:
    mean, std, n, undefined = nan_summary(values)
    return {"spearman": mean, "spearman_std": std, "defined": n, "undefined": undefined}


def _comparison(cross: dict[str, Tensor], sums: dict[str, Tensor], n: int, layer_names) -> ScopeComparison:
    """--scope both: ρ(head-scope scores, network-scope scores) per method; the mean Δ per layer at each scope."""
    head, network = sums["head"] / n, sums["network"] / n
    return ScopeComparison(
        methods={k: _summary(v) for k, v in cross.items()},
        layers={
            name: {
                "delta_head": float(head[i]),
                "delta_network": float(network[i]),
                "direct_share": float(head[i] / network[i]) if abs(float(network[i])) > 1e-12 else float("nan"),
            }
            for i, name in enumerate(layer_names)
        },
    )


def _network_notes(plan: AuditPlan) -> list[str]:
    notes = []
    if plan.settings.by_class:
        notes.append("--by-class covers the head scope only")
    if any(m in plan.methods for m in ("laya", "contrib", "global")):
        notes.append(
            "network scope: laya, contrib and global are the head's own (direct-effect) scores, "
            "here scored against total effects"
        )
    if "ig" in plan.methods:
        notes.append(
            "network scope: ig integrates from the patch itself, so its layer scores add up to the patch effects "
            "(completeness): a reference computed another way, not a competitor"
        )
    return notes


@dataclass
class _NetworkRun:
    """What every batch of a network-scope audit uses besides its own rows."""

    plan: AuditPlan
    net: NetworkScope
    generator: torch.Generator  # ``random``'s draws
    labels: Tensor  # every sample's label
    both: bool  # --scope both: also compare each method's scores with its head-scope ones
    computed: list[str]  # the methods scored per batch (``global`` needs the mean α of all: after the batches)

    @classmethod
    def prepare(cls, plan: AuditPlan, net: NetworkScope, eval_data, both: bool) -> _NetworkRun:
        active = plan.active
        return cls(
            plan=plan,
            net=net,
            generator=plan.generator(plan.settings.seed, replay="random" in active),
            labels=eval_data.features.labels if hasattr(eval_data, "features") else eval_data.labels,
            both=both,
            computed=[m for m in active if m != "global"],
        )

    def rows(self) -> dict[str, Rows]:
        """The per-sample states, declared alike on every rank (one with an empty shard still takes part in
        each gather)."""
        n, n_layers = self.plan.n, self.plan.n_layers
        per_method = lambda names: Rows(n).add_states(names)
        rows = {
            "common": Rows(n)
            .add_states(["pred", "label"], torch.long)
            .add_states(["oracle", "random"])
            .add_states(["degenerate", "tie_degenerate"], torch.bool),
            "rho": per_method(self.computed),
            "tie": Rows(n).add_states(self.computed, torch.bool),
            "d1": per_method(self.computed),
        }
        if getattr(self.net.head, "has_alpha", False) and not self.both:  # --scope network: α's collapse summary
            rows["common"].add_state("alpha", torch.float32, n_layers)
        if "global" in self.plan.active:  # the head's mean α (summed in batch order) and the total effects
            rows["global"] = Rows(n).add_state("alpha", width=n_layers, reduce="sum")
            rows["global"].add_state("delta", torch.float32, n_layers)
        if "ig" in self.computed:  # the steps IG used per (sample, layer)
            rows["ig_steps"] = Rows(n).add_state("steps", torch.long, n_layers)
        if self.both:
            rows["cross"] = per_method(["lolo_effects", *self.computed])
            rows["sums"] = Rows(n).add_states(["head", "network"], width=n_layers, reduce="sum")
        return rows


def _scores_on(run: _NetworkRun, m: str, x: Tensor, hs, feats, ctx: AttributionContext, rows, delta) -> Tensor:
    """Method ``m``'s (B, L) layer scores at network scope (Captum's, for SCOPED_METHODS; IG's steps into ``rows``)."""
    s, net = run.plan.settings, run.net
    if m == "ig":
        scores, steps = net.adaptive_integrated_gradients(
            x, hs, feats, ctx.target, delta, s.steps, s.ig_tol, s.internal_batch_size, s.reduce
        )
        rows["ig_steps"].append(steps=steps)
        return scores
    if m == "gradxact":
        return net.gradient_x_activation(x, ctx.target, s.reduce)
    if m == "atp":
        return net.attribution_patching(x, hs, ctx.target, s.reduce)
    if m == "saliency":
        return net.saliency(x, ctx.target, s.reduce)
    return METHODS[m](net.head, feats, ctx)


def _network_batch(run: _NetworkRun, first: int, xb, rows: dict[str, Rows]) -> None:
    """Score every method on the batch of images [first, first + B) against its total effects: append the rows."""
    s, net, head = run.plan.settings, run.net, run.net.head
    x = to_float_images(to_device(xb, s.device))
    y = run.labels[first : first + len(xb)].to(s.device)
    hs = net.activations(x)
    with torch.no_grad():
        feats = net.pooled(hs)
        out = head(feats)
        pred = out.logits.argmax(-1)
    if "alpha" in rows["common"]:
        rows["common"].append(alpha=out.alpha.float().cpu())
    target = pred if s.target == "predicted" else y
    delta = net.effects(x, hs, feats, target).cpu()
    ctx = run.plan.context(target, run.generator)
    if run.both:
        dh = lolo_effects(head, feats, target, run.plan.references.removal, s.ablation).cpu()
        rows["cross"].append(lolo_effects=spearman_rows(dh, delta))
        rows["sums"].append(head=dh.double().sum(0, keepdim=True), network=delta.double().sum(0, keepdim=True))
    for m in run.computed:
        a = _scores_on(run, m, x, hs, feats, ctx, rows, delta).cpu()
        rho = spearman_rows(a, delta, s.tie_tol)
        rows["rho"].append({m: rho})
        rows["tie"].append({m: tie_undefined(rho, spearman_rows(a, delta), delta, s.tie_tol)})
        rows["d1"].append({m: deletion_at_1(a, delta, s.tie_tol)[0]})
        if run.both:
            a_head = METHODS[m](head, feats, ctx).cpu() if m in SCOPED_METHODS else a
            rows["cross"].append({m: spearman_rows(a_head, a)})
    if "global" in rows:
        rows["global"].append(alpha=laya_attention(head, feats).cpu().double().sum(0, keepdim=True), delta=delta)
    _, oracle, random = deletion_at_1(delta, delta)
    degenerate = degenerate_effects(delta, s.tie_tol)
    rows["common"].append(
        pred=pred.cpu(),
        label=y.cpu(),
        oracle=oracle,
        random=random,
        degenerate=degenerate,
        tie_degenerate=degenerate & ~degenerate_effects(delta),
    )


def run_scoped_audit(
    model,
    eval_data,
    methods: Sequence[str],
    settings: AuditSettings | None = None,
    scope: str = "both",
    reference: Sequence[Tensor] | None = None,
    use_cache: bool = True,
    prefix: bool | None = None,
) -> AuditResult:
    """``laya audit --scope network|both``: the network-scope audit (and, for ``both``, the head
    scope's own ``run_audit`` plus their comparison). ``eval_data`` must hold the images (EvalData).

    ``methods``: as ``run_audit`` takes them (in any case). ``reference``: the unpooled activation a
    patched layer takes (default: ``network_reference``). Streams in batches of ``settings.batch_size``;
    under torchrun the batches are sharded as in ``run_audit`` and the per-sample numbers gathered.
    Returns an ``AuditResult`` whose ``network`` holds the network scope (for ``network`` alone its
    head-scope ``methods`` are empty).

    ``settings`` and ``scope`` are trusted as validated (``laya audit`` and ``laya_cli.audit`` validate them, and
    ``audit_job`` checks that the taps can be patched, before any work).
    """
    settings = settings or AuditSettings()
    if scope == "head":
        return run_audit(model, eval_data, methods, settings)
    images = getattr(eval_data, "images", None)
    if images is None:
        raise LayaError("a network-scope audit runs the backbone: it needs the images (EvalData), not features")
    # The head scope (and the plan's record of the settings) removes by mean where the network removes by input.
    head_settings = replace(settings, ablation=head_ablation(settings.ablation))
    plan = AuditPlan.prepare(model, methods, head_settings, len(images), len(model.backbone.layer_names))
    if reference is None:
        reference = network_reference(model, settings.ablation, settings.device, use_cache)
    model.backbone.eval().to(settings.device)
    model.head.eval().to(settings.device)
    net = NetworkScope(model.backbone, model.head, reference, prefix, settings.ablation)
    head_result = run_audit(model, eval_data, plan.methods, head_settings) if scope == "both" else None
    run = _NetworkRun.prepare(plan, net, eval_data, both=head_result is not None)
    rows = run.rows()
    batches = image_batches(images, settings.batch_size, plan.shard.start, plan.shard.stop)
    for first, xb in plan.shard.walk(batches, "auditing (network scope)"):
        _network_batch(run, first, xb, rows)
    got = {k: r.gather() for k, r in rows.items()}  # back in the original order, on every rank
    common, rho, d1, tie, tol = got["common"], got["rho"], got["d1"], got["tie"], settings.tie_tol
    if "global" in got:  # the mean α of the whole audited set, scored on every sample
        alpha, delta = got["global"]["alpha"], got["global"]["delta"]
        a = global_weights((alpha / plan.n).float(), plan.n)
        rho["global"], d1["global"] = spearman_rows(a, delta, tol), deletion_at_1(a, delta, tol)[0]
        tie["global"] = tie_undefined(rho["global"], spearman_rows(a, delta), delta, tol)
    layer_names = list(getattr(model, "layer_names", None) or model.backbone.layer_names)
    methods = _method_scores(plan, rho, d1, tie, common)
    network_intervals(methods, rho, d1, common, settings)  # --ci (auditing/intervals.py)
    if "ig_steps" in got and methods["ig"].available:
        methods["ig"].ig_steps = steps_summary(got["ig_steps"]["steps"], settings.steps, settings.ig_tol)
    network = NetworkResult(
        methods=methods,
        patched="prefix" if net.prefix else "full",
        reference=settings.ablation,
        comparison=_comparison(got["cross"], got["sums"], plan.n, layer_names) if run.both else None,
        notes=_network_notes(plan),
        ties=ties_block(tol, int(common["degenerate"].sum()), int(common["tie_degenerate"].sum()), methods),
    )
    if head_result is None:
        head_result = AuditResult(
            settings=plan.settings_dict(eval_data),
            n_samples=len(common["label"]),
            accuracy=accuracy(common["pred"], common["label"]),
            layers=layer_names,
            methods={},
            notes=plan.notes(),
            groups=(),  # the network scope computes no deeper metric
        )
        record_collapse(head_result, common.get("alpha"))
    head_result.settings["scope"] = scope
    head_result.network = network
    return head_result
