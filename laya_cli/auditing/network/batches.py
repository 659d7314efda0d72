"""The network-scope audit's batches: per batch the taps' activations (once), the total effects Δ_i (each tap patched
inside the backbone), every method's scores against them (its own network attribution or the head's scores,
``registry.Method.network``), their ρ and Deletion@1; after the batches, the whole-set methods (``global``) and the
summary (``results.NetworkResult``). ``auditing.job.run_scoped_audit`` runs it beside the head scope.

One forward of the network per batch gives the taps, r_i, the head's output and ŷ: a plain pass without gradients,
or, where a gradient method (Grad×Act, AtP, saliency: ``Method.from_gradients``) is asked, Captum's forward and
backward of their layer gradients (``NetworkScope.taps_and_gradients``), run before the removals so that its graph
is freed before them; those methods' scores are made from the gradients then, so that the gradients are not held
through the removals either. A backbone whose own engine is no forward hooks (``NetworkScope.one_pass``) keeps its
plain pass and Captum's beside it. Then the removals' staircase and the head passes of Δ."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...data.images import image_batches
from ...features.extraction import to_float_images
from ...runtime.device import to_device
from ...runtime.progress import phase
from ..budget import ig_rows
from ..ig_steps import steps_summary
from ..intervals import network_intervals
from ..methods import AttributionContext, global_weights
from ..metrics import (
    Faithfulness,
    deletion_at_1,
    faithfulness_rows,
    lolo_effects,
    near_equal_effects,
    ranking_block,
    spearman_rows,
    stacked_scores,
    tie_undefined,
    undetermined_note,
)
from ..plan import AuditPlan, Rows, to_host
from ..registry import METHODS, having
from ..results import ties_block
from ..settings import AuditSettings
from .patching import NetworkScope
from .reference import network_reference
from .results import NetworkResult, method_scores, scope_comparison


def _direct_note() -> str:
    """How a network-scope audit reads the direct-effect scores (registry.Method.direct: laya, contrib, global)."""
    *most, last = having("direct")
    return (
        f"network scope: {', '.join(most)} and {last} are the head's own (direct-effect) scores, "
        "here scored against total effects"
    )


def network_notes(plan: AuditPlan) -> list[str]:
    notes = ["--by-class covers the head scope only"] if plan.settings.by_class else []
    if having("direct", plan.methods):
        notes.append(_direct_note())
    return notes + [METHODS[m].network_note for m in having("network_note", plan.methods)]


def network_scope(model, settings: AuditSettings, reference=None, use_cache: bool = True, prefix=None) -> NetworkScope:
    """The model's backbone and head on the device, patched by ``settings``' network removal; ``reference``: the
    unpooled activation a patched layer takes (default: ``network_reference``)."""
    removal = settings.removal.network
    if reference is None:
        reference = network_reference(model, removal, settings.device, use_cache)
    model.backbone.eval().to(settings.device)
    model.head.eval().to(settings.device)
    net = NetworkScope(model.backbone, model.head, reference, prefix, removal)
    # the L removals' suffixes stacked (L·B rows, no gradients) where the plan lets IG's passes hold as many rows
    net.stack_rows = ig_rows(settings.batch_size, settings.steps, settings.internal_batch_size, network=True)
    return net


@dataclass
class Batch:
    """One batch at network scope and what every method on it is scored against."""

    x: Tensor  # the float images
    hs: list[Tensor]  # the taps' activations
    feats: list[Tensor]  # pooled: the head's r_i
    target: Tensor  # the explained class ŷ
    delta: Tensor  # (B, L) total effects: on the CPU once the methods have scored (``plan.to_host``)
    ctx: AttributionContext
    steps: dict[str, Tensor] = field(default_factory=dict)  # the methods with a convergence delta: their IG steps
    grads: list[Tensor] | None = None  # dp_ŷ/dh_i for the gradient methods: the batch's forward's, else registry's
    early: dict[str, Tensor] = field(default_factory=dict)  # the gradient methods' scores, made before Δ (``_batch``)


@dataclass
class Probed:
    """The estimate's probe of this rank's first batch, whole (``probe_batch``): its rows and ``random``'s generator
    state after it, which the audit takes as its first batch instead of computing it again (``run_network``)."""

    images: int
    rows: dict[str, Rows]
    generator_state: Tensor


@dataclass
class NetworkRun:
    """What every batch of a network-scope audit uses besides its own rows."""

    plan: AuditPlan
    net: NetworkScope
    generator: torch.Generator  # ``random``'s draws
    labels: Tensor  # every sample's label
    both: bool  # --scope both: also compare each method's scores with its head-scope ones
    computed: list[str]  # the methods scored per batch (the whole-set ones need all batches first)
    whole: list[str]  # the whole-set methods (``global``): scored after the batches
    probed: Probed | None = None  # the estimate's probe of the first batch, kept for the audit (``probe_batch``)

    @property
    def crossed(self) -> list[str]:
        """The methods whose head- and network-scope scores --scope both compares: those with an attribution of
        their own at network scope. The others (laya, contrib, random) score the same at both scopes, so their ρ
        is 1 by construction: not a finding, left out."""
        return [m for m in self.computed if METHODS[m].network]

    @classmethod
    def prepare(cls, plan: AuditPlan, net: NetworkScope, eval_data, both: bool) -> NetworkRun:
        active = plan.active
        return cls(
            plan=plan,
            net=net,
            generator=plan.generator(plan.settings.seed, replay=bool(having("draws", active))),
            labels=eval_data.features.labels if hasattr(eval_data, "features") else eval_data.labels,
            both=both,
            computed=[m for m in active if not METHODS[m].whole_set],
            whole=having("whole_set", active),
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
            .add_states(["degenerate", "tie_degenerate", "near_equal"], torch.bool),
            "rho": per_method(self.computed),
            "tie": Rows(n).add_states(self.computed, torch.bool),
            "d1": per_method(self.computed),
        }
        if getattr(self.net.head, "has_alpha", False) and not self.both:  # --scope network: α's collapse summary
            rows["common"].add_state("alpha", torch.float32, n_layers)
        if self.whole:  # their per-batch sums (added in batch order) and the total effects
            rows["whole"] = Rows(n).add_states(self.whole, width=n_layers, reduce="sum")
            rows["whole"].add_state("delta", torch.float32, n_layers)
        if having("convergence", self.computed):  # the steps IG used per (sample, layer)
            rows["steps"] = Rows(n).add_states(having("convergence", self.computed), torch.long, n_layers)
        if self.both:
            rows["cross"] = per_method(["lolo_effects", *self.crossed])
            rows["sums"] = Rows(n).add_states(["head", "network"], width=n_layers, reduce="sum")
        return rows


def _scores_on(run: NetworkRun, m: str, b: Batch) -> Tensor:
    """Method ``m``'s (B, L) layer scores at network scope: its own network attribution, else the head's scores."""
    method = METHODS[m]
    return method.network(run, b) if method.network else method(run.net.head, b.feats, b.ctx)


def _batch(run: NetworkRun, first: int, xb) -> tuple[Batch, Tensor, Tensor]:
    """The batch of images [first, first + B) with its total effects; its labels and the head's output."""
    s, net = run.plan.settings, run.net
    x = to_float_images(to_device(xb, s.device))
    y = run.labels[first : first + len(xb)].to(s.device)
    labels = None if s.target == "predicted" else y
    gradient_methods = having("from_gradients", run.computed)
    grads = None
    if gradient_methods and net.one_pass:  # the gradients' forward is the batch's own
        hs, feats, out, target, grads = net.taps_and_gradients(x, labels)  # its graph freed before the removals
    else:
        hs = net.activations(x)
        with torch.no_grad():
            feats = net.pooled(hs)
            out = net.head(feats)
        target = out.logits.argmax(-1) if labels is None else labels
    ctx = dataclasses.replace(run.plan.context(target, run.generator), alpha=out.alpha)  # laya: the batch's forward's
    b = Batch(x, hs, feats, target, None, ctx, grads=grads)
    if grads is not None:  # their (B, L) scores now: the gradients (as large as the taps) not held through the removals
        b.early = {m: _scores_on(run, m, b) for m in gradient_methods}
        b.grads = None
    b.delta = net.effects(x, hs, feats, target)  # on the host with the scores, in one copy (``network_batch``)
    return b, y, out


def batch_work(run: NetworkRun) -> dict[str, float]:
    """What one batch's parts cost, as shares of the batch (for the progress inside it): in passes of the network
    after a tap, L for the effects, IG about 3 × its steps per layer (forward and backward), a layer-gradient method
    3, a head-only one next to nothing. An estimate: the line's time left is one."""
    L, s = run.plan.n_layers, run.plan.settings
    cost = {"effects": float(L) + 1.0}
    for m in run.computed:
        method = METHODS[m]
        cost[m] = 3.0 * s.steps * L if method.convergence and method.network else 3.0 if method.network else 0.01
    total = sum(cost.values())
    return {k: v / total for k, v in cost.items()}


def network_batch(run: NetworkRun, first: int, xb, rows: dict[str, Rows]) -> None:
    """Score every method on the batch of images [first, first + B) against its total effects: append the rows."""
    s, head = run.plan.settings, run.net.head
    work = batch_work(run)
    with phase(work["effects"]):
        b, y, out = _batch(run, first, xb)
    scored, crossed = _scores(run, b)
    alpha = [out.alpha.float()] if "alpha" in rows["common"] else []
    b.delta, *host = to_host([b.delta, *scored.values(), *alpha])  # one copy of the batch's (B, L) tensors
    if alpha:
        rows["common"].append(alpha=host.pop())
    delta = b.delta
    if run.both:
        dh = lolo_effects(head, b.feats, b.target, run.plan.references.removal, s.removal.head).cpu()
        rows["cross"].append(lolo_effects=spearman_rows(dh, delta))
        rows["sums"].append(head=dh.double().sum(0, keepdim=True), network=delta.double().sum(0, keepdim=True))
    faith = _score_methods(run, b, dict(zip(scored, host)), crossed, rows)
    if b.steps:
        rows["steps"].append(b.steps)
    if run.whole:
        rows["whole"].append({m: METHODS[m].whole_set.batch_sum(head, b.feats) for m in run.whole}, delta=delta)
    rows["common"].append(
        pred=out.logits.argmax(-1).cpu(),
        label=y.cpu(),
        oracle=faith.oracle,
        random=faith.random,
        degenerate=faith.degenerate,
        tie_degenerate=faith.degenerate & ~faith.exactly_degenerate,
        near_equal=near_equal_effects(delta),
    )


def _scores(run: NetworkRun, b: Batch) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Every method's scores on the batch (in the audit's order: ``random`` draws from the audit's generator) and,
    with --scope both, the head's own scores of each network method (to hold against its network ones)."""
    work, head, both = batch_work(run), run.net.head, run.both
    scored, crossed = {}, {}
    for m in run.computed:
        with phase(work[m]):
            scored[m] = b.early[m] if m in b.early else _scores_on(run, m, b)
        if both and METHODS[m].network:
            crossed[m] = METHODS[m](head, b.feats, b.ctx)
    return scored, crossed


def _score_methods(run: NetworkRun, b: Batch, scored, crossed, rows: dict[str, Rows]) -> Faithfulness:
    """The methods' ρ, tie flags and Deletion@1 against Δ (``scored``: their scores on the host) and Δ's own
    degenerate rows, oracle and random expectation, in one set of kernels (``faithfulness_rows``: the same numbers as
    ``spearman_rows``, ``tie_undefined`` and ``deletion_at_1`` method by method)."""
    stacked = stacked_scores(list(scored.values()), b.delta)
    faith = faithfulness_rows(stacked, b.delta, run.plan.settings.tie_tol)
    for m, rho, tie, d1 in zip(scored, faith.rho.unbind(), faith.tie_undefined.unbind(), faith.d1.unbind()):
        rows["rho"].append({m: rho})
        rows["tie"].append({m: tie})
        rows["d1"].append({m: d1})
    if crossed:  # the head's scores of the network methods: one host copy
        heads = torch.stack([a.double() for a in crossed.values()]).cpu()
        network = stacked[[list(scored).index(m) for m in crossed]]
        rows["cross"].append(dict(zip(crossed, spearman_rows(heads, network))))
    return faith


def probe_batch(run: NetworkRun, xb) -> None:
    """The per-batch work of ``network_batch`` on the audit's first images ``xb`` (``estimate.audit_cost`` probes
    those), ``random`` drawing from a copy of the audit's generator (its own is left where it stands): what the
    estimate times. Where ``xb`` is this rank's whole first batch, its rows and the copy's state are kept
    (``run.probed``): the audit takes them as its first batch, the numbers and ``random``'s later draws those it
    would have computed (a probe of fewer images than a batch, the heavy backbone's, is thrown away)."""
    generator = torch.Generator()
    generator.set_state(run.generator.get_state())
    probe = dataclasses.replace(run, generator=generator, probed=None)
    rows = probe.rows()
    network_batch(probe, 0, xb, rows)
    shard = run.plan.shard
    if shard.start == 0 and len(xb) == min(shard.batch_size, shard.stop):
        run.probed = Probed(len(xb), rows, generator.get_state())


def _score_whole_set(run: NetworkRun, got: dict, rho: dict, d1: dict, tie: dict) -> None:
    """The whole-set methods (``global``: the mean α of the whole audited set), scored on every sample."""
    n, tol, delta = run.plan.n, run.plan.settings.tie_tol, got["whole"]["delta"] if run.whole else None
    for m in run.whole:
        a = global_weights((got["whole"][m] / n).float(), n)
        rho[m], d1[m] = spearman_rows(a, delta, tol), deletion_at_1(a, delta, tol)[0]
        tie[m] = tie_undefined(rho[m], spearman_rows(a, delta), delta, tol)


def run_network(run: NetworkRun, images, layer_names: Sequence[str]) -> tuple[NetworkResult, dict[str, Tensor]]:
    """The network-scope audit of ``images`` in batches of ``settings.batch_size`` (sharded under torchrun, the
    per-sample numbers gathered): its result, and the per-sample numbers every method shares (``common``)."""
    plan, settings = run.plan, run.plan.settings
    rows, probed = run.rows(), run.probed
    batches = image_batches(images, settings.batch_size, plan.shard.start, plan.shard.stop)
    for first, xb in plan.shard.walk(batches, "auditing (network scope)"):
        if probed is not None and first == 0 and len(xb) == probed.images:  # the estimate's probe ran it already
            rows = probed.rows
            run.generator.set_state(probed.generator_state)  # ``random``'s next draws: those after this batch
            continue
        network_batch(run, first, xb, rows)
    run.probed = None
    got = {k: r.gather() for k, r in rows.items()}  # back in the original order, on every rank
    common, rho, d1, tie, tol = got["common"], got["rho"], got["d1"], got["tie"], settings.tie_tol
    _score_whole_set(run, got, rho, d1, tie)
    methods = method_scores(plan, rho, d1, tie, common)
    network_intervals(methods, rho, d1, common, settings)  # --ci (auditing/intervals.py)
    for m, steps in got.get("steps", {}).items():
        if methods[m].available:
            methods[m].ig_steps = steps_summary(steps, settings.steps, settings.ig_tol)
    network = NetworkResult(
        methods=methods,
        patched="prefix" if run.net.prefix else "full",
        reference=settings.ablation,
        comparison=scope_comparison(got["cross"], got["sums"], plan.n, layer_names) if run.both else None,
        notes=network_notes(plan),
        ties=ties_block(tol, int(common["degenerate"].sum()), int(common["tie_degenerate"].sum()), methods),
        ranking=ranking_block(common["near_equal"]),
    )
    network.notes += [n for n in [undetermined_note(network.ranking, "network")] if n]
    return network, common
