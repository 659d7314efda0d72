"""One record per attribution method (Captum's pattern: a method is one object), in one registry.

A ``Method`` says everything the audit knows of a method: its scores at head scope, its own attribution at
network scope (if it has one), its convergence delta (if it reports one), what it needs from the head, what it
costs (its cost class: what the network-scope estimate counts), how a language model's network scope computes it
(if it does), where it is compared by default, what the audit notes of it, and whether its scores are one statistic
of the whole audited set (``global``). Adding a method = one record here (its scores in ``methods.py``, Captum
wrapped) and one line in ``METHODS``: no other module tests a method's name.

No torch at import: the gates and the command line read the names (``names.py``); the scores import
``methods.py`` (torch, Captum) when first called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.errors import unknown_choice

HeadScores = Callable[[Any, Any, Any], Any]  # (head, feats, ctx: methods.AttributionContext) -> (B, L) scores
# (run, batch) -> (B, L): the method at network scope (run: network.batches.NetworkRun, batch: its Batch)
NetworkScores = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class WholeSet:
    """Scores that are one statistic of the whole audited set, the same for every sample (``global``: the mean α).
    The head scope computes its mean in a pass before the batches (``AttributionContext.global_weights``); the
    network scope sums it batch by batch and scores the mean after them."""

    batch_sum: Callable[[Any, Any], Any]  # (head, feats) -> (1, L) float64 sum over the batch's samples


# Where a method is compared when ``--compare`` is left out (``Method.compared_by_default``): ``laya audit`` at each
# scope, ``laya bench`` of a classifier and of a language model, ``laya diff`` of two language models.
DEFAULT_PLACES = ("head", "network", "both", "bench", "lm-bench", "lm-diff")
# What a method costs at network scope, in forwards of the backbone per sample (``estimate.network_passes``):
# nothing beyond the taps and the removals (``free``), one forward and backward of the whole model (``gradient``),
# or its integration steps on every layer's suffix (``path``: IG).
COST_CLASSES = ("free", "gradient", "path")
# The situations an audit notes of a method (``Method.notes``; ``plan.audit_notes``): its head scope on a scalarmix
# head, with --ablation mask, and on a head that normalises every layer (--layer-norm).
NOTE_SITUATIONS = ("scalarmix", "mask", "scale_free")


@dataclass(frozen=True)
class Method:
    """Everything the audit knows of one attribution method."""

    name: str
    head: HeadScores  # its (B, L) scores at head scope (and, without ``network``, at network scope too)
    # Its own attribution at network scope, through every later layer: gradients from p_ŷ back to each tap (the
    # taps must reach them, ``network.checks``); None: the head's scores, scored against the total effects.
    network: NetworkScores | None = None
    # ((B, L) scores, (B,) Captum's convergence delta Σ attributions − (p_ŷ(x) − p_ŷ(baseline))): the audit calls
    # it instead of ``head`` (same scores) for completeness and for the steps each sample needs.
    convergence: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None
    requires: tuple[str, str] | None = None  # (head capability flag, what to say when the head lacks it)
    always: bool = False  # audited whatever ``--compare`` says (laya, random)
    own: bool = False  # the model's own attribution (the head's α): what an unqualified gate item checks
    ig_rows: bool = False  # Captum's internal_batch_size bounds its rows per pass (--max-memory plans it)
    model_free: bool = False  # its scores ignore the model (the random floor): randomisation flags it by design
    draws: bool = False  # its scores are drawn from ``ctx.generator`` (replayed for earlier ranks under torchrun)
    direct: bool = False  # the head's own direct-effect score (a network-scope audit notes it is scored as is)
    # A language model's network scope (auditing/lm.py), per batch of blocks: ``tokens`` (batch: lm.TokenBatch) ->
    # its (N, L) scores at the batch's N positions; or ``token_gradient`` (h_i, x_i) -> what ∂p_ŷ(t)/∂h_i is
    # multiplied by (one backward pass per position, shared by every such method). Neither: not built there.
    tokens: Callable[[Any], Any] | None = None
    token_gradient: Callable[[Any, Any], Any] | None = None
    network_note: str | None = None  # what a network-scope audit of it notes
    whole_set: WholeSet | None = None
    cost: str = "free"  # its cost class at network scope (COST_CLASSES)
    # (net, i, h_i, g_i) -> its per-feature attribution of tap i from g_i = dp_ŷ/dh_i, the layer gradients that
    # Grad×Act, AtP and saliency share at network scope (net: the NetworkScope; ``NetworkScope.from_gradients``).
    # Given, it is the method's network scores (``network``), one Captum pass for all such methods.
    from_gradients: Callable[[Any, int, Any, Any], Any] | None = None
    compared_by_default: tuple[str, ...] = ()  # the DEFAULT_PLACES where --compare left out compares it
    notes: tuple[tuple[str, str], ...] = ()  # (situation of NOTE_SITUATIONS, what the audit notes of it there)

    def __post_init__(self):
        assert self.cost in COST_CLASSES and set(self.compared_by_default) <= set(DEFAULT_PLACES)
        assert {situation for situation, _ in self.notes} <= set(NOTE_SITUATIONS)
        if self.from_gradients is not None and self.network is None:
            object.__setattr__(self, "network", _from_layer_gradients(self.from_gradients))

    @property
    def built_for_tokens(self) -> bool:
        """Whether a language model's network scope computes it."""
        return self.tokens is not None or self.token_gradient is not None

    def note(self, situation: str) -> str | None:
        """What the audit notes of this method in ``situation`` (NOTE_SITUATIONS), or None."""
        return dict(self.notes).get(situation)

    def __call__(self, head, feats, ctx):
        return self.head(head, feats, ctx)

    def unavailable_reason(self, head) -> str | None:
        """Why this method is undefined for ``head``, or None when it applies."""
        if self.requires is None or getattr(head, self.requires[0], False):
            return None
        from ..model.heads import head_kind

        return f"undefined: the {head_kind(head)} head {self.requires[1]}"


# --------------------------------------------------------------------------- the methods' scores


def _laya(head, feats, ctx):
    from .methods import laya_attention

    known = getattr(ctx, "alpha", None)  # the batch's forward already gave it (``AttributionContext.alpha``)
    return known if known is not None else laya_attention(head, feats)


def _contrib(head, feats, ctx):
    from .methods import contrib

    return contrib(head, feats, ctx.target)


def _ig(head, feats, ctx, return_delta: bool = False):
    from .methods import integrated_gradients

    c = ctx
    return integrated_gradients(
        head, feats, c.target, c.baseline, c.n_steps, c.internal_batch_size, c.reduce, return_delta, c.endpoints
    )


def _gradxact(head, feats, ctx):
    from .methods import gradient_x_activation

    return gradient_x_activation(head, feats, ctx.target, ctx.reduce)


def _atp(head, feats, ctx):
    from .methods import attribution_patching

    return attribution_patching(head, feats, ctx.target, ctx.baseline, ctx.reduce)


def _saliency(head, feats, ctx):
    from .methods import saliency

    return saliency(head, feats, ctx.target, ctx.reduce)


def _global(head, feats, ctx):
    from .methods import global_weights

    return global_weights(ctx.global_weights, len(feats[0]))


def _alpha_sum(head, feats):
    from .methods import laya_attention

    return laya_attention(head, feats).cpu().double().sum(0, keepdim=True)


def _random(head, feats, ctx):
    from .methods import random_scores

    return random_scores(len(feats[0]), len(feats), ctx.generator).to(feats[0].device)


# At network scope (run: network.batches.NetworkRun; b: its Batch): Captum's layer attributions (network/methods.py).
def _ig_network(run, b):
    s = run.plan.settings
    scores, steps = run.net.adaptive_integrated_gradients(
        b.x, b.hs, b.feats, b.target, b.delta, s.steps, s.ig_tol, s.internal_batch_size, s.reduce
    )
    b.steps["ig"] = steps
    return scores


def _layer_gradients(run, b):
    """dp_ŷ/dh_i of the batch's taps: one Captum forward and backward shared by Grad×Act, AtP and saliency (each
    asked for them alone before: one pass each, for the same gradients). Where the batch's own forward was that pass
    (``NetworkScope.taps_and_gradients``), the batch holds them already."""
    if b.grads is None:
        b.grads = run.net.layer_gradients(b.x, b.target, multiply=False)
    return b.grads


def _from_layer_gradients(part):
    """The network-scope scores of the method whose per-feature attribution is ``part`` (``Method.from_gradients``)."""
    return lambda run, b: run.net.from_gradients(part, b.hs, _layer_gradients(run, b), run.plan.settings.reduce)


# Each tap's per-feature attribution from its gradient g = dp_ŷ/dh_i (what Captum's LayerGradientXActivation
# multiplies): Grad×Act g·h, AtP g·(h − the removal's fill), saliency |g|.
def _gradxact_part(net, i, h, g):
    return h * g


def _atp_part(net, i, h, g):
    return (h - net.fill(i, h)) * g


def _saliency_part(net, i, h, g):
    return g.abs()


# A language model's network scope (auditing/lm.py; b: its TokenBatch).
def _alpha_tokens(b):
    return b.alpha


def _random_tokens(b):
    import torch

    return torch.rand(b.alpha.shape[0], b.n_layers, generator=b.generator)


# --------------------------------------------------------------------------- the records

ALPHA = "has no layer attention α (only laya and scalarmix heads do)"
LAYA = Method(
    "laya",
    _laya,
    requires=("has_alpha", ALPHA),
    always=True,
    own=True,
    direct=True,
    tokens=_alpha_tokens,
    notes=(("scalarmix", "on a scalarmix head, laya's α is the static softmax(w), the same for every sample"),),
)
CONTRIB = Method(
    "contrib",
    _contrib,
    requires=("has_layer_logits", "has no additive per-layer logits (contrib is intrinsic to a laya head)"),
    direct=True,
    compared_by_default=("bench",),
)
IG = Method(
    "ig",
    _ig,
    _ig_network,
    convergence=lambda head, feats, ctx: _ig(head, feats, ctx, return_delta=True),
    ig_rows=True,
    network_note="network scope: ig integrates from the patch itself, so its layer scores add up to the patch effects "
    "(completeness): a reference computed another way, not a competitor",
    cost="path",
    compared_by_default=("head", "both", "bench"),
    notes=(
        ("mask", "--ablation mask has no input-space reference: IG uses the mean training features r̄ as its baseline"),
    ),
)
GRADXACT = Method(
    "gradxact",
    _gradxact,
    token_gradient=lambda h, x_in: h,  # Σ_s ∂p_ŷ(t)/∂h_i(s) · h_i(s)
    cost="gradient",
    from_gradients=_gradxact_part,
    compared_by_default=("head", "network", "both", "bench", "lm-bench", "lm-diff"),
    notes=(
        (
            "scale_free",
            "gradxact: this head normalises every layer (--layer-norm), so p_ŷ does not change along r_i and "
            "r_i · ∂p/∂r_i ≈ 0 by construction: its faithfulness says nothing; compare ig or atp",
        ),
    ),
)
ATP = Method(
    "atp",
    _atp,
    token_gradient=lambda h, x_in: h.float() - x_in.float(),  # · (h_i(s) − x_i(s)): the bypass's first order
    cost="gradient",
    from_gradients=_atp_part,
    compared_by_default=("network", "both"),
)
SALIENCY = Method("saliency", _saliency, cost="gradient", from_gradients=_saliency_part)
GLOBAL = Method(
    "global",
    _global,
    requires=("has_alpha", "has no layer weights to average (only laya and scalarmix heads do)"),
    direct=True,
    tokens=_alpha_tokens,  # averaged over every position after the batches (whole_set)
    whole_set=WholeSet(_alpha_sum),
    compared_by_default=("bench",),
)
RANDOM = Method("random", _random, always=True, model_free=True, draws=True, tokens=_random_tokens)

# The registry, in the order of the tables: laya, the methods ``--compare`` chooses from, random.
METHODS: dict[str, Method] = {m.name: m for m in (LAYA, IG, GRADXACT, ATP, SALIENCY, CONTRIB, GLOBAL, RANDOM)}


def having(flag: str, methods=None) -> list[str]:
    """The names among ``methods`` (default: every registered one) whose record sets ``flag``, in their order."""
    return [m for m in (METHODS if methods is None else methods) if m in METHODS and getattr(METHODS[m], flag)]


def compared_by_default(place: str) -> str:
    """The comma list ``--compare`` means when left out at ``place`` (DEFAULT_PLACES), in the registry's order."""
    assert place in DEFAULT_PLACES
    return ",".join(m.name for m in METHODS.values() if place in m.compared_by_default)


def unavailable_reason(method: str, head) -> str | None:
    """Why ``method`` is undefined for this head, or None when it applies."""
    if method not in METHODS:
        raise unknown_choice("method", method, METHODS)
    return METHODS[method].unavailable_reason(head)
