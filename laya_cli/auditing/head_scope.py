"""The head-scope audit: attribution methods and faithfulness metrics over a data set (gating: ``laya_cli.gates``).

``run_audit`` streams the audited features through the head in batches: per batch, one
forward (predictions, target ŷ), the LOLO effects Δ (L+1 head passes, run as one pass of (L+1)·B rows) and for
each method its (B, L) scores (IG's in as few steps as each sample needs, ``ig_steps``); then every method's ρ and
Deletion@1 at once (``metrics.faithfulness_rows``: a few kernels per batch, not a few per method).
The deeper metric groups cost more and run only when asked for (``settings.metrics``): ``aopc``
the deletion curve (L passes per method), ``sufficiency`` the keep-only-one-layer probabilities
(L passes) and the insertion curve (L per method), ``randomisation`` every method again on each
stage of a re-initialised copy of the head; ``completeness`` reuses IG's convergence delta.
Per sample it keeps only a few numbers, so memory does not grow with the feature width (it keeps
Δ, each method's L scores, ρ and Deletion@1 per sample too, for ``AuditResult.per_sample()``).
``global`` needs the mean α of the whole audited set first (its record's ``WholeSet``): a forward-only
pass over the same batches, only when it is audited. Under torchrun the batches are sharded over the ranks
(docs/scaling.md). Definitions: docs/metrics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..features.extraction import feature_batches, num_layers
from ..model.heads import cascade_stages, randomised_copy
from .collapse import collapse_notes, collapse_summary, trained_against
from .ig_steps import HEAD_FIRST_STEPS, adaptive_ig, steps_summary
from .intervals import attach_intervals, class_intervals
from .methods import random_scores
from .metrics import (
    STACK_MIN_ROWS,
    Faithfulness,
    accuracy,
    aopc,
    chance_level,
    completeness,
    curves_sharing_passes,
    deletion_at_1,
    faithfulness_rows,
    keep_only_probability,
    lolo_effects,
    nan_summaries,
    nan_summary,
    near_chance,
    near_equal_effects,
    normalised_deletion,
    rank_layers,
    ranking_block,
    row_means,
    spearman_rows,
    stacked_scores,
    target_probability,
    tie_levels,
    undetermined_note,
)
from .plan import AuditPlan, Rows, to_host
from .registry import METHODS, having
from .results import AuditResult, ClassScores, MethodScores, ties_block
from .settings import AuditSettings

# Seed offset of the tie-breaking draws of the deletion/insertion curves (independent of ``random``'s).
_TIE_SEED = 0x7135


# --------------------------------------------------------------------------- summaries

_CURVES = ("deletion_curve", "insertion_curve")  # per-sample rows of L values
_WIDE = (*_CURVES, "scores")  # per-sample rows of L values (``scores``: the method's own, for per_sample())


def _mean(t: Tensor) -> float:
    return t.double().mean().item() if len(t) else float("nan")


def _curve(rows: Tensor) -> list[float]:
    """The mean curve over the samples where it is defined (a (n, L) table of per-sample curves)."""
    ok = ~rows.isnan().any(-1)
    return rows[ok].mean(0).tolist() if ok.any() else [float("nan")] * rows.shape[-1]


def _cascade(per: dict[str, Tensor], checked: Tensor, stages: Sequence[str]) -> list[dict]:
    """The model-randomisation check per stage, over the samples it ran on: mean ρ and undefined samples."""
    out = []
    for k, stage in enumerate(stages):
        rho, _, _, undefined = nan_summary(per[f"randomised{k}"][checked])
        out.append({"stage": stage, "spearman": rho, "undefined": undefined})
    return out


def _aopc(per: dict[str, Tensor]) -> dict:
    aopc_, aopc_std, _, aopc_undefined = nan_summary(per["aopc"])
    return {
        "aopc": aopc_,
        "aopc_std": aopc_std,
        "aopc_undefined": aopc_undefined,
        "deletion_curve": _curve(per["deletion_curve"]),
    }


def _sufficiency(per: dict[str, Tensor], common: dict[str, Tensor]) -> dict:
    ok = ~per["sufficiency"].isnan()
    value, oracle, random = (_mean(t[ok]) for t in (per["sufficiency"], common["keep_oracle"], common["keep_random"]))
    return {
        "sufficiency": value,
        "sufficiency_oracle": oracle,
        "sufficiency_random": random,
        "sufficiency_normalised": normalised_deletion(value, oracle, random),
        "sufficiency_undefined": int((~ok).sum()),
        "insertion_curve": _curve(per["insertion_curve"]),
    }


def _completeness(per: dict[str, Tensor], common: dict[str, Tensor]) -> dict:
    if "completeness_error" not in per:  # not a method with a convergence delta
        return {}
    value, error, effect = completeness(per["completeness_error"], common["effect"])
    return {"completeness": value, "completeness_error": error, "completeness_effect": effect}


def _randomisation(per: dict[str, Tensor], common: dict[str, Tensor], stages: Sequence[str]) -> dict:
    cascade = _cascade(per, common["checked"], stages)
    last = cascade[-1] if cascade else {"spearman": math.nan, "undefined": 0}  # the fully re-initialised head
    return {
        "randomisation": 1 - last["spearman"],
        "randomisation_spearman": last["spearman"],
        "randomisation_undefined": last["undefined"],
        "randomisation_cascade": cascade,
    }


def _summarise(
    per: dict[str, Tensor], common: dict[str, Tensor], stages: Sequence[str], plan: AuditPlan, first: dict
) -> MethodScores:
    """One method's scores; ``first``: its faithfulness, Deletion@1 and the counts, made for every method at once
    (``_first_metrics``)."""
    groups, s = plan.groups, plan.settings
    deeper = {
        **(_aopc(per) if "aopc" in groups else {}),
        **(_sufficiency(per, common) if "sufficiency" in groups else {}),
        **(_completeness(per, common) if "completeness" in groups else {}),
        **(_randomisation(per, common, stages) if "randomisation" in groups else {}),
    }
    return MethodScores(
        **first,
        normalised=normalised_deletion(first["deletion_at_1"], first["oracle"], first["random"]),
        groups=groups,
        ig_steps=steps_summary(per["ig_steps"], s.steps, s.ig_tol) if "ig_steps" in per else None,
        **deeper,
    )


def _first_metrics(per: dict[str, dict[str, Tensor]], common: dict[str, Tensor]) -> dict[str, dict]:
    """Faithfulness (mean ρ, its std, defined and undefined samples), Deletion@1, its oracle and random expectation,
    the degenerate samples and those undefined by ties, per method: the same numbers as method by method, each
    made once for every method on the (M, N) tables (``nan_summaries``, ``row_means``) and the shared ones once."""
    if not per:
        return {}
    rho = torch.stack([rows["rho"] for rows in per.values()]).double()
    rho = rho.masked_fill(common["degenerate"], float("nan"))  # ρ says nothing there (docs/metrics.md): undefined
    d1 = row_means(torch.stack([rows["d1"] for rows in per.values()]).double())
    by_ties = torch.stack([rows["tie_undefined"] for rows in per.values()]).sum(-1).tolist()
    oracle, random = row_means(torch.stack([common["oracle"], common["random"]]).double())
    shared = {"oracle": oracle, "random": random, "degenerate": int(common["degenerate"].sum())}
    return {
        m: {**shared, "faithfulness": f, "faithfulness_std": sd, "defined": n, "undefined": undefined,
            "deletion_at_1": d, "undefined_by_ties": int(ties)}
        for m, (f, sd, n, undefined), d, ties in zip(per, nan_summaries(rho), d1, by_ties)
    }  # fmt: skip


def _unavailable(note: str, common: dict[str, Tensor], plan: AuditPlan, stages: Sequence[str]) -> MethodScores:
    n, nan, groups, n_layers = len(common["oracle"]), math.nan, plan.groups, plan.n_layers
    checked = int(common["checked"].sum()) if stages else 0
    known = {}
    if "aopc" in groups:
        known.update(aopc_undefined=n, deletion_curve=[nan] * n_layers)
    if "sufficiency" in groups:
        known.update(
            sufficiency_undefined=n,
            sufficiency_oracle=_mean(common["keep_oracle"]),
            sufficiency_random=_mean(common["keep_random"]),
            insertion_curve=[nan] * n_layers,
        )
    if "randomisation" in groups:
        known.update(
            randomisation_undefined=checked,
            randomisation_cascade=[{"stage": st, "spearman": nan, "undefined": checked} for st in stages],
        )
    return MethodScores.unavailable(
        note, n, oracle=_mean(common["oracle"]), random=_mean(common["random"]), groups=groups, **known
    )


def _scores(plan: AuditPlan, per, common, stages, rows: Tensor | None = None) -> dict[str, MethodScores]:
    """Every method's scores over the audited samples (``rows``: a mask of them)."""
    pick = (lambda t: t) if rows is None else (lambda t: t[rows])
    common = {k: pick(v) for k, v in common.items()}
    available = {m: {k: pick(v) for k, v in per[m].items()} for m in plan.methods if not plan.reasons[m]}
    first = _first_metrics(available, common)
    return {
        m: (
            _summarise(available[m], common, stages, plan, first[m])
            if m in available
            else _unavailable(plan.reasons[m], common, plan, stages)
        )
        for m in plan.methods
    }


# --------------------------------------------------------------------------- the run


def _common_states(n: int, n_layers: int, alpha: bool = False) -> Rows:
    """The per-sample numbers every method shares (``alpha``: the head's α too, for its collapse summary)."""
    rows = Rows(n).add_state("pred", torch.long).add_state("label", torch.long)
    for name in ("oracle", "random", "keep_oracle", "keep_random", "target", "effect"):
        rows.add_state(name)
    rows.add_states(("checked", "degenerate", "tie_degenerate"), torch.bool)
    if alpha:
        rows.add_state("alpha", torch.float32, n_layers)
    return rows.add_state("delta", width=n_layers)


def _method_states(method: str, n: int, n_layers: int, n_stages: int, groups: Sequence[str]) -> Rows:
    """The per-sample numbers run_audit keeps for one method: those of the metric groups computed."""
    keys = ["rho", "d1", "scores"]
    if "aopc" in groups:
        keys += ["aopc", "deletion_curve"]
    if "sufficiency" in groups:
        keys += ["sufficiency", "insertion_curve"]
    converges = METHODS[method].convergence is not None
    if converges:  # IG: its steps, and its convergence delta for completeness
        keys += ["completeness_error"]
    rows = Rows(n)
    for key in keys + [f"randomised{k}" for k in range(n_stages)]:
        rows.add_state(key, width=n_layers if key in _WIDE else None)
    if converges:
        rows.add_state("ig_steps", torch.long)
    return rows.add_state("tie_undefined", torch.bool)


def _features(eval_data):
    return eval_data.features if hasattr(eval_data, "features") else eval_data


def _replayed(state: Tensor) -> torch.Generator:
    g = torch.Generator()
    g.set_state(state)
    return g


def _whole_set_weights(plan: AuditPlan, heads: Sequence, feats) -> list[Tensor | None]:
    """The weights of the audited whole-set method (``registry.WholeSet``: ``global``, the mean α) on each head,
    over the whole audited set (a forward-only pass); None for each head without one.

    Per-batch sums are gathered from every rank and added in batch order, so the weights are
    bit-identical to a one-process run.
    """
    method = next((METHODS[m] for m in plan.active if METHODS[m].whole_set), None)
    if method is None:
        return [None] * len(heads)
    sums = Rows(plan.n)
    for j in range(len(heads)):
        sums.add_state(f"head{j}", width=plan.n_layers, reduce="sum")
    dev = plan.settings.device
    batches = feature_batches(feats, plan.settings.batch_size, plan.shard.start, plan.shard.stop)
    for _, (xs, _) in plan.shard.walk(batches, f"{method.name} weights"):
        x = [t.to(dev).float() for t in xs]
        sums.append({f"head{j}": method.whole_set.batch_sum(h, x) for j, h in enumerate(heads)})
    return [(total / plan.n).float().to(dev) for total in sums.gather().values()]


@dataclass
class _HeadScope:
    """What every batch of a head-scope audit uses besides its own rows."""

    plan: AuditPlan
    head: torch.nn.Module
    generator: torch.Generator  # ``random``'s draws
    ties: torch.Generator  # the tie-breaking of the curves' rankings
    check_stop: int  # the model-randomisation check runs on samples [0, check_stop)
    stages: list[str]  # its cascade, output → adapters
    stage_heads: list  # the copies of the head re-initialised down to each stage
    weights: list  # the whole-set method's (``global``: mean α) of the head, then of each copy (or None)

    @classmethod
    def prepare(cls, plan: AuditPlan, head, feats) -> _HeadScope:
        s, active = plan.settings, plan.active
        generator = plan.generator(s.seed, replay=bool(having("draws", active)))
        ties = plan.generator(s.seed + _TIE_SEED)
        # The model-randomisation check: copies of the head re-initialised from the classifier down
        # (cascading), seeded; the loaded head is never touched. It runs on the first
        # ``randomisation_samples`` rows, rounded up to whole batches (so ``random`` replays its draws).
        check_stop = min(plan.n, -(-s.randomisation_samples // s.batch_size) * s.batch_size)
        check_stop = check_stop if "randomisation" in plan.groups else 0  # only when asked for
        stages = cascade_stages(head) if check_stop else []
        stage_heads = [randomised_copy(head, k + 1, s.seed) for k in range(len(stages))]
        heads = [head, *stage_heads]
        weights = _whole_set_weights(plan, heads, feats)
        return cls(
            plan=plan,
            head=head,
            generator=generator,
            ties=ties,
            check_stop=check_stop,
            stages=stages,
            stage_heads=stage_heads,
            weights=weights,
        )


@dataclass
class _Batch:
    """One batch of a head-scope audit and what every method on it is scored against."""

    x: list[Tensor]
    target: Tensor  # the explained class ŷ
    base: Tensor  # p_ŷ(x)
    delta: Tensor  # (B, L) LOLO effects Δ: on the CPU once the methods have scored (``plan.to_host``)
    keep: Tensor | None  # (B, L) p_ŷ with only layer i kept, on the CPU (sufficiency only)
    keys: Tensor  # (B, L) tie-breaking keys of the curves' rankings
    check: bool  # in the model-randomisation check
    effect: Tensor | None = None  # |p_ŷ(x) − p_ŷ(r̄)|: what IG's attributions should add up to
    at_baseline: Tensor | None = None  # p_ŷ(r̄) per sample (IG's convergence delta reads it and ``base``)


def _converging(
    run: _HeadScope, m: str, head, b: _Batch, ctx, effect: Tensor, endpoints: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """A method with a convergence delta (IG) on ``head`` in as few steps as each sample needs
    (``ig_steps.adaptive_ig``); ``effect``: |p_ŷ(x) − p_ŷ(r̄)| on that head; ``endpoints``: p_ŷ(x) and p_ŷ(r̄) on
    it per sample, which each round's convergence delta reads instead of two head passes where the round has
    ``STACK_MIN_ROWS`` rows (fewer rows could round otherwise than the batch's passes did)."""
    s = run.plan.settings

    def attribute(rows: Tensor, n_steps: int):
        on = rows.to(b.target.device)
        known = tuple(e[on] for e in endpoints) if endpoints is not None and len(on) >= STACK_MIN_ROWS else None
        sub = replace(ctx, target=ctx.target[on], n_steps=n_steps, endpoints=known)
        return METHODS[m].convergence(head, [t[on] for t in b.x], sub)

    a, conv, steps = adaptive_ig(attribute, effect, s.steps, s.ig_tol, HEAD_FIRST_STEPS)
    return a, {"completeness_error": conv.detach().abs().double().cpu(), "ig_steps": steps}


def _randomised(run: _HeadScope, m: str, a: Tensor, b: _Batch, stage_ctxs) -> dict[str, Tensor]:
    """ρ between the method's scores and its scores on each re-initialised copy of the head (IG through the same
    adaptive path as on the trained head, so each copy's samples get the steps they need)."""
    out = {}
    for k, (h, c) in enumerate(zip(run.stage_heads, stage_ctxs)):
        if not b.check:
            out[f"randomised{k}"] = torch.full((len(a),), float("nan"), dtype=torch.float64)
            continue
        if METHODS[m].convergence:
            again = _converging(run, m, h, b, c, _ig_effect(h, b, run.plan.references.baseline))[0]
        else:
            again = METHODS[m](h, b.x, c)
        out[f"randomised{k}"] = spearman_rows(a, again.cpu())
    return out


def _curves(run: _HeadScope, a: Tensor, b: _Batch) -> dict[str, Tensor]:
    """The deletion curve and AOPC, sufficiency@1 and the insertion curve, as far as their groups are asked for:
    D_1, I_1 and sufficiency@1 reuse the LOLO and keep-only passes (``metrics.curves_sharing_passes``)."""
    groups = run.plan.groups
    if "aopc" not in groups and "sufficiency" not in groups:
        return {}
    bad = a.isnan().any(-1)  # no ranking: the curves and sufficiency are undefined there
    tol = run.plan.settings.tie_tol
    order = rank_layers(tie_levels(a, tol), b.keys).to(b.base.device)
    known = {"base": b.base, "delta": b.delta.to(b.base.device)}
    if "sufficiency" in groups:
        known["keep"] = b.keep.to(b.base.device)
    s, removal = run.plan.settings, run.plan.references.removal
    curves = curves_sharing_passes(run.head, b.x, b.target, order, known, removal, s.removal.head)
    out = {key: curve.cpu().double().masked_fill(bad.unsqueeze(-1), float("nan")) for key, curve in curves.items()}
    if "aopc" in groups:
        out["aopc"] = aopc(out["deletion_curve"])
    else:
        del out["deletion_curve"]
    if "sufficiency" in groups:
        out["sufficiency"] = deletion_at_1(a, b.keep, tol)[0].masked_fill(bad, float("nan"))
    return out


def _method_scores(run: _HeadScope, m: str, b: _Batch, ctx) -> tuple[Tensor, dict[str, Tensor]]:
    """One method's (B, L) scores on one batch, where the head computed them (``plan.to_host`` brings them over), and
    what its convergence says (IG: its error and steps)."""
    if METHODS[m].convergence:
        return _converging(run, m, run.head, b, ctx, b.effect, (b.base, b.at_baseline))
    return METHODS[m](run.head, b.x, ctx), {}


def _methods_on_batch(run: _HeadScope, b: _Batch, scored, stage_ctxs, stacked, faith: Faithfulness) -> dict[str, dict]:
    """Every audited method's per-sample numbers on one batch (float64, on the CPU) from its scores there
    (``scored``: method -> (scores on the host, what its convergence says); ``stacked``: the same scores as one (M, B,
    L) tensor) and their ρ, ties and Deletion@1, made for all methods at once (``faith``: ``faithfulness_rows``)."""
    per = {}
    rows = zip(faith.rho.unbind(), faith.tie_undefined.unbind(), faith.d1.unbind(), stacked.unbind())  # views
    for (m, (a, out)), (rho_, tie_, d1_, scores) in zip(scored.items(), rows):
        out.update(rho=rho_, tie_undefined=tie_, d1=d1_, scores=scores)
        out.update(_curves(run, a, b))
        out.update(_randomised(run, m, a, b, stage_ctxs))
        per[m] = out
    return per


def _at_baseline(head, b: _Batch, baseline) -> Tensor:
    """p_ŷ(r̄) per sample on ``head`` (the audited one or a re-initialised copy), where IG's path starts."""
    at_ref = (
        [torch.zeros_like(r) for r in b.x] if baseline is None else [ref.expand_as(r) for ref, r in zip(baseline, b.x)]
    )
    with torch.no_grad():
        return target_probability(head(at_ref).logits, b.target)


def _ig_effect(head, b: _Batch, baseline) -> Tensor:
    """|p_ŷ(x) − p_ŷ(r̄)| per sample on ``head`` (a re-initialised copy; the audited head's: ``_audit_batch``): what
    IG's attributions should add up to (float64, on the CPU)."""
    with torch.no_grad():
        base = target_probability(head(b.x).logits, b.target)
        return (base - _at_baseline(head, b, baseline)).abs().double().cpu()


def _audit_batch(run: _HeadScope, first: int, xs, y, common: Rows, per: dict[str, Rows]) -> None:
    """Score every method on the batch of samples [first, first + B): append their rows."""
    s, head, removal, groups = run.plan.settings, run.head, run.plan.references.removal, run.plan.groups
    how = s.removal.head  # mean where the network scope removes a block by its input
    x, y = [t.to(s.device).float() for t in xs], y.to(s.device)
    with torch.no_grad():
        out = head(x)
    logits, pred = out.logits, out.logits.argmax(-1)
    target = pred if s.target == "predicted" else y
    b = _Batch(
        x=x,
        target=target,
        base=target_probability(logits, target),
        delta=lolo_effects(head, x, target, removal, how),  # on the host with the scores, in one copy (below)
        keep=keep_only_probability(head, x, target, removal, how).cpu() if "sufficiency" in groups else None,
        keys=random_scores(len(y), run.plan.n_layers, run.ties),
        check=first < run.check_stop,
    )
    if having("convergence", run.plan.active):
        b.at_baseline = _at_baseline(head, b, run.plan.references.baseline)
        b.effect = (b.base - b.at_baseline).abs().double().cpu()
    state = run.generator.get_state()  # ``random`` on a randomised head draws the very same scores
    ctx = replace(run.plan.context(target, run.generator, run.weights[0]), alpha=out.alpha)  # laya: the same pass
    stage_ctxs = [run.plan.context(target, _replayed(state), w) for w in run.weights[1:]]
    scored = {m: _method_scores(run, m, b, ctx) for m in run.plan.active}
    alpha = [out.alpha.float()] if "alpha" in common else []  # the head's α, whichever methods run (its collapse)
    b.delta, *host = to_host([b.delta, *(a for a, _ in scored.values()), *alpha])  # one copy of the batch's
    if alpha:
        common.append(alpha=host.pop())
    scored = {m: (a, out) for (m, (_, out)), a in zip(scored.items(), host)}
    stacked = stacked_scores([a for a, _ in scored.values()], b.delta)
    faith = faithfulness_rows(stacked, b.delta, s.tie_tol)
    for m, rows in _methods_on_batch(run, b, scored, stage_ctxs, stacked, faith).items():
        per[m].append(rows)
    pred_host, label_host = pred.cpu(), y.cpu()
    nan_rows = torch.full((len(y),), float("nan"), dtype=torch.float64)  # a group not computed
    _, keep_oracle, keep_random = deletion_at_1(b.keep, b.keep) if b.keep is not None else (None, nan_rows, nan_rows)
    common.append(
        pred=pred_host,
        label=label_host,
        oracle=faith.oracle,
        random=faith.random,
        keep_oracle=keep_oracle,
        keep_random=keep_random,
        effect=b.effect if b.effect is not None else nan_rows,
        target=(pred_host if target is pred else label_host).double(),
        checked=torch.full((len(y),), b.check),
        degenerate=faith.degenerate,
        tie_degenerate=faith.degenerate & ~faith.exactly_degenerate,
        delta=b.delta.double(),
    )


def run_audit(model, eval_data, methods: Sequence[str], settings: AuditSettings | None = None) -> AuditResult:
    """Audit ``model`` (a LayaModel) on ``eval_data`` (EvalData, LayerFeatures or StreamedFeatures).

    ``methods``: names from ``registry.METHODS`` (see ``parse_methods``), in any case. Methods a head
    cannot support (``laya`` on a ``last`` head, say) are reported as undefined, not raised.

    Streams in batches of ``settings.batch_size`` and keeps only a few numbers per sample. Under
    torchrun each rank audits its own contiguous whole batches (so every batch, and every number,
    is the one a single process computes) and the per-sample results are gathered on every rank,
    which all compute the same summary. ``model`` is never modified: the model-randomisation
    check re-initialises copies of its head.
    """
    settings = settings or AuditSettings()  # valid as built
    feats = _features(eval_data)
    model.head.eval().to(settings.device)
    plan = AuditPlan.prepare(model, methods, settings, len(feats), num_layers(feats))
    run = _HeadScope.prepare(plan, model.head, feats)
    common = _common_states(plan.n, plan.n_layers, alpha=getattr(model.head, "has_alpha", False))
    per = {m: _method_states(m, plan.n, plan.n_layers, len(run.stages), plan.groups) for m in plan.active}
    batches = feature_batches(feats, settings.batch_size, plan.shard.start, plan.shard.stop)
    for first, (xs, y) in plan.shard.walk(batches, "auditing"):
        _audit_batch(run, first, xs, y, common, per)
    # Back in the original order, on every rank (a no-op without torchrun).
    common, per = common.gather(), {m: rows.gather() for m, rows in per.items()}
    labels, preds, stages = common["label"], common["pred"], run.stages
    result = AuditResult(
        settings=plan.settings_dict(eval_data),
        n_samples=len(labels),
        accuracy=accuracy(preds, labels),
        layers=list(getattr(model, "layer_names", None) or [f"layer{i}" for i in range(plan.n_layers)]),
        methods=_scores(plan, per, common, stages),
        randomisation_stages=stages,
        randomisation_samples=int(common["checked"].sum()) if stages else 0,
        groups=plan.groups,
    )
    num_classes = len(getattr(model, "classes", None) or [])
    degenerate, by_ties = int(common["degenerate"].sum()), int(common["tie_degenerate"].sum())
    result.ties = ties_block(settings.tie_tol, degenerate, by_ties, result.methods)
    result.ranking = ranking_block(near_equal_effects(common["delta"]))
    result.notes += [n for n in [undetermined_note(result.ranking, "head")] if n]
    lm = getattr(model, "task", None) == "lm"  # a language model's positions (auditing/lm.py)
    result.notes = plan.notes(result.methods) + _warnings(result, labels, num_classes, degenerate, by_ties, lm)
    record_collapse(result, common.get("alpha"), model)
    result.samples = _samples(getattr(eval_data, "index", None), common, per)
    result.class_names = [str(c) for c in getattr(model, "classes", None) or []]
    attach_intervals(result, per, common, settings)  # --ci: bootstrap intervals (auditing/intervals.py)
    if settings.by_class:
        classes = list(getattr(model, "classes", None) or [])
        result.by_class = _by_class(classes, plan, stages, common, per)
        rows = {_class_name(classes, c): (labels == c).cpu().numpy() for c in labels.unique(sorted=True).tolist()}
        class_intervals(result.by_class, rows, result.columns, settings)  # --ci: per class, as the overall ones
    return result


def record_collapse(result: AuditResult, alpha: Tensor | None, model=None) -> None:
    """The summary of how much of the depth α uses over the audited samples (None for a head without α) and, when
    α has collapsed, its note: a warning, or the finding of an α trained against the network's effects (docs/metrics.md,
    "α collapse"). ``model``: whose checkpoint says what α was trained to rank."""
    against = trained_against(getattr(model, "checkpoint", None))
    result.alpha_collapse = collapse_summary(alpha, against) if alpha is not None else None
    result.notes += collapse_notes(result.alpha_collapse, result.layers)


def _class_name(classes: list[str], c: int) -> str:
    return classes[c] if c < len(classes) else str(c)


def _samples(index, common: dict[str, Tensor], per: dict[str, dict[str, Tensor]]) -> dict:
    """What ``AuditResult.per_sample`` tabulates."""
    return {
        "index": torch.as_tensor(index).long() if index is not None else torch.arange(len(common["label"])),
        "label": common["label"],
        "predicted": common["pred"],
        "target": common["target"].long(),
        "delta": common["delta"].float(),
        "scores": {m: rows["scores"] for m, rows in per.items()},
        # ρ is undefined (NaN) where every Δ is equal, as in the summary (docs/metrics.md)
        "faithfulness": {m: rows["rho"].masked_fill(common["degenerate"], float("nan")) for m, rows in per.items()},
        "deletion@1": {m: rows["d1"] for m, rows in per.items()},
    }


def _by_class(classes: list[str], plan: AuditPlan, stages, common, per) -> dict[str, ClassScores]:
    """Every method's scores over the samples of each true class."""
    labels, preds, out = common["label"], common["pred"], {}
    for c in labels.unique(sorted=True).tolist():
        rows = labels == c
        out[_class_name(classes, c)] = ClassScores(
            n=int(rows.sum()),
            accuracy=accuracy(preds[rows], labels[rows]),
            methods=_scores(plan, per, common, stages, rows),
        )
    return out


def _warnings(
    result: AuditResult, labels: Tensor, num_classes: int, degenerate: int, by_ties: int = 0, lm: bool = False
) -> list[str]:
    """What makes the numbers above read as a finding when they are not one (docs/metrics.md). A language model's
    next-token accuracy is held against always predicting the most frequent next token, not against chance over
    its vocabulary (``lm``)."""
    out = []
    n = result.n_samples
    classes = max(num_classes, int(labels.max()) + 1 if len(labels) else 0)
    chance = chance_level(labels, classes) if classes else float("nan")
    if lm:
        out += _lm_baseline_warning(result.accuracy, labels, n)
    elif near_chance(result.accuracy, chance, n):
        out.append(
            f"warning: accuracy {result.accuracy:.3f} on {n} samples is within noise of chance "
            f"({chance:.3f}, {classes} classes): the model has learnt little, so no attribution of its "
            f"decisions (faithfulness or Deletion@1, of any method) means much"
        )
    if degenerate:
        out.append(degenerate_note(degenerate, n, by_ties, result.settings.get("tie_tol", 0.0)))
    return out


def _lm_baseline_warning(accuracy_: float, labels: Tensor, n: int) -> list[str]:
    """A language model's head no better than the most frequent next token of these positions, always predicted."""
    if not len(labels):
        return []
    counts = torch.bincount(labels.long())
    token, share = int(counts.argmax()), float(counts.max()) / len(labels)
    if not near_chance(accuracy_, share, n):
        return []
    return [
        f"warning: next-token accuracy {accuracy_:.3f} on {n} positions is no better than always predicting the "
        f"most frequent next token of these positions (token id {token}: {share:.3f}): the head has learnt little "
        f"of the text, so no attribution of its predictions (faithfulness or Deletion@1, of any method) means much"
    ]


def degenerate_note(degenerate: int, n: int, by_ties: int, tol: float) -> str:
    """The note on samples whose effects Δ vary in at most one layer (``by_ties`` of them only within ``tol``)."""
    every = degenerate == n
    ties = (
        f" ({by_ties} of them only within the given tie tolerance, --tie-tol {tol:g}: effects that close count "
        "as equal)"
        if by_ties
        else ""
    )
    return (
        f"faithfulness is degenerate on {'all ' if every else ''}{degenerate} of {n} samples{ties}: removing "
        f"any layer but one changes nothing there (Δ varies in at most one layer), so a rank "
        f"correlation over layers measures nothing; they count as undefined"
        + (" and faithfulness is undefined for every method" if every else "")
    )
