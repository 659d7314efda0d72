"""``laya audit``: run attribution methods and faithfulness metrics over a data set, and gate on them.

``run_audit`` streams the audited features through the head in batches: per batch, one
forward (predictions, target ŷ), the LOLO effects Δ (L+1 head passes), the keep-only-one-layer
probabilities (L passes), and for each method its (B, L) scores, its deletion and insertion
curves (2L passes), and its scores on every stage of a re-initialised copy of the head (the
model-randomisation check); per sample it keeps only a few numbers (ρ, Deletion@1, the two
curves, sufficiency@1, IG's convergence delta, the randomisation ρ per stage), so memory does
not grow with the feature width (it keeps Δ, each method's L scores, ρ and Deletion@1 per
sample too, for ``AuditResult.per_sample()``). ``global`` needs the mean α of the whole audited
set first: a forward-only pass over the same batches, only when ``global`` is audited. Under
torchrun the batches are sharded over the ranks (docs/scaling.md). Definitions: docs/metrics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from ..features.extraction import feature_batches, num_layers
from ..model.heads import cascade_stages, head_kind, randomised_copy
from ..runtime.config import AuditSettings
from ..runtime.distributed import cat_rows, gather_rows, gathered_sum, shard_bounds
from ..runtime.errors import LayaError, match_choice
from ..runtime.fileio import json_safe, strict_json
from ..runtime.progress import track
from .methods import (
    CONVERGENCE,
    METHODS,
    AttributionContext,
    laya_attention,
    random_scores,
    unavailable_reason,
)
from .metrics import (
    COMPLETENESS_FLAG,
    RANDOMISATION_FLAG,
    accuracy,
    aopc,
    chance_level,
    check_ablation,
    completeness,
    degenerate_effects,
    deletion_at_1,
    deletion_curve,
    insertion_curve,
    keep_only_probability,
    lolo_effects,
    nan_summary,
    near_chance,
    normalised_deletion,
    rank_layers,
    spearman_rows,
    target_probability,
)
from .names import (
    ONLY_FOR,
)

assert set(ONLY_FOR["completeness"]) == set(CONVERGENCE)  # the methods that report a convergence delta
# Seed offset of the tie-breaking draws of the deletion/insertion curves (independent of ``random``'s).
_TIE_SEED = 0x7135


@dataclass
class MethodScores:
    """One method's metrics over a set of samples (NaN where undefined)."""

    faithfulness: float
    faithfulness_std: float
    defined: int  # samples where ρ is defined (both vectors vary)
    undefined: int
    deletion_at_1: float
    oracle: float
    random: float
    normalised: float
    available: bool = True
    note: str | None = None
    degenerate: int = 0  # of the undefined samples: those whose Δ varies in at most one layer
    # The deeper metrics (docs/metrics.md); NaN where undefined or not applicable to the method.
    aopc: float = math.nan
    aopc_std: float = math.nan
    aopc_undefined: int = 0
    deletion_curve: list[float] = field(default_factory=list)  # mean D_k, k = 1 … L
    sufficiency: float = math.nan  # sufficiency@1
    sufficiency_oracle: float = math.nan
    sufficiency_random: float = math.nan
    sufficiency_normalised: float = math.nan
    sufficiency_undefined: int = 0
    insertion_curve: list[float] = field(default_factory=list)  # mean I_k, k = 1 … L
    completeness: float = math.nan  # 1 − mean |δ| / mean |p_ŷ(x) − p_ŷ(r̄)| (IG only)
    completeness_error: float = math.nan
    completeness_effect: float = math.nan
    randomisation: float = math.nan  # 1 − mean ρ(scores, scores on the fully re-initialised head)
    randomisation_spearman: float = math.nan
    randomisation_undefined: int = 0
    randomisation_cascade: list[dict] = field(default_factory=list)  # per stage: stage, spearman, undefined

    def metric(self, name: str) -> float:
        return {
            "faithfulness": self.faithfulness,
            "deletion@1": self.deletion_at_1,
            "deletion@1_normalised": self.normalised,
            "aopc": self.aopc,
            "sufficiency@1": self.sufficiency,
            "sufficiency@1_normalised": self.sufficiency_normalised,
            "completeness": self.completeness,
            "randomisation": self.randomisation,
        }[name]

    @property
    def completeness_flagged(self) -> bool | None:
        """IG's attributions miss more than 5 % of the effect: raise --steps. None: not applicable."""
        return None if math.isnan(self.completeness) else self.completeness < COMPLETENESS_FLAG

    @property
    def randomisation_flagged(self) -> bool | None:
        """The scores barely change when the head is re-initialised. None: undefined."""
        return None if math.isnan(self.randomisation) else self.randomisation < RANDOMISATION_FLAG

    def to_dict(self) -> dict:
        return {
            "faithfulness": self.faithfulness,
            "faithfulness_std": self.faithfulness_std,
            "undefined": self.undefined,
            "defined": self.defined,
            "deletion@1": self.deletion_at_1,
            "deletion@1_oracle": self.oracle,
            "deletion@1_random": self.random,
            "deletion@1_normalised": self.normalised,
            "available": self.available,
            "note": self.note,
            "degenerate": self.degenerate,
            "aopc": self.aopc,
            "aopc_std": self.aopc_std,
            "aopc_undefined": self.aopc_undefined,
            "deletion_curve": self.deletion_curve,
            "sufficiency@1": self.sufficiency,
            "sufficiency@1_oracle": self.sufficiency_oracle,
            "sufficiency@1_random": self.sufficiency_random,
            "sufficiency@1_normalised": self.sufficiency_normalised,
            "sufficiency@1_undefined": self.sufficiency_undefined,
            "insertion_curve": self.insertion_curve,
            "completeness": self.completeness,
            "completeness_error": self.completeness_error,
            "completeness_effect": self.completeness_effect,
            "completeness_flagged": self.completeness_flagged,
            "randomisation": self.randomisation,
            "randomisation_spearman": self.randomisation_spearman,
            "randomisation_undefined": self.randomisation_undefined,
            "randomisation_flagged": self.randomisation_flagged,
            "randomisation_cascade": self.randomisation_cascade,
        }


@dataclass
class ClassScores:
    n: int
    accuracy: float
    methods: dict[str, MethodScores]

    def to_dict(self) -> dict:
        return {"n": self.n, "accuracy": self.accuracy, "methods": {m: s.to_dict() for m, s in self.methods.items()}}


@dataclass
class AuditResult:
    settings: dict
    n_samples: int
    accuracy: float
    layers: list[str]
    methods: dict[str, MethodScores]
    by_class: dict[str, ClassScores] | None = None
    notes: list[str] = field(default_factory=list)
    randomisation_stages: list[str] = field(default_factory=list)  # the cascade, output → adapters
    randomisation_samples: int = 0  # samples the model-randomisation check ran on
    # Per sample (not in the JSON): index, label, predicted, target (N,), delta (N, L), and per
    # method its attribution scores (N, L), faithfulness ρ (N,) and Deletion@1 (N,).
    samples: dict | None = field(default=None, repr=False)
    network: object | None = None  # --scope network|both: a network.NetworkResult (docs/metrics.md)

    @property
    def summary(self) -> dict:
        """The JSON document of ``laya audit --json`` (without its ``fail_under`` block), as a dict."""
        return self.to_dict()

    def to_pandas(self, by_class: bool = False):
        """One row per method: faithfulness (mean ρ, std, defined/undefined samples) and Deletion@1
        (value, oracle, random expectation, normalised). ``by_class``: one row per (class, method)."""
        import pandas as pd

        def rows(methods: dict[str, MethodScores], **extra) -> list[dict]:
            return [{**extra, "method": m, **s.to_dict()} for m, s in methods.items()]

        if by_class:
            if self.by_class is None:
                raise LayaError("this audit has no per-class results: run it with by_class=True")
            data = [r for c, cs in self.by_class.items() for r in rows(cs.methods, **{"class": c, "n": cs.n})]
            return pd.DataFrame(data).set_index(["class", "method"])
        return pd.DataFrame(rows(self.methods)).set_index("method")

    def per_sample(self):
        """One row per audited sample: ``index``, ``label``, ``predicted``, ``target`` (the class
        explained), ``delta[<layer>]`` (Δ_i, the drop in p_target when layer i is removed), and per
        method ``faithfulness[<method>]`` (ρ), ``deletion@1[<method>]`` and ``<method>[<layer>]``
        (its attribution score of each layer)."""
        import pandas as pd

        if self.samples is None:
            raise LayaError("this audit kept no per-sample results")
        s = self.samples
        cols: dict[str, object] = {k: s[k].numpy() for k in ("index", "label", "predicted", "target")}
        for i, name in enumerate(self.layers):
            cols[f"delta[{name}]"] = s["delta"][:, i].double().numpy()
        for m in s["scores"]:
            cols[f"faithfulness[{m}]"] = s["faithfulness"][m].numpy()
            cols[f"deletion@1[{m}]"] = s["deletion@1"][m].numpy()
            for i, name in enumerate(self.layers):
                cols[f"{m}[{name}]"] = s["scores"][m][:, i].double().numpy()
        return pd.DataFrame(cols)

    def to_dict(self) -> dict:
        out = {
            "settings": self.settings,
            "n_samples": self.n_samples,
            "accuracy": self.accuracy,
            "layers": self.layers,
            "methods": {m: s.to_dict() for m, s in self.methods.items()},
            "notes": self.notes,
            "randomisation_stages": self.randomisation_stages,
            "randomisation_samples": self.randomisation_samples,
        }
        if self.by_class is not None:
            out["by_class"] = {c: s.to_dict() for c, s in self.by_class.items()}
        if self.network is not None:  # --scope network: "methods" stays, empty (no head-scope results)
            out["network"] = self.network.to_dict()
        return json_safe(out)

    def to_json(self) -> str:
        """Strict JSON (NaN and ±inf written as null)."""
        return strict_json(self.to_dict())


# --------------------------------------------------------------------------- the run

_CURVES = ("deletion_curve", "insertion_curve")  # per-sample rows of L values
_WIDE = (*_CURVES, "scores")  # per-sample rows of L values (``scores``: the method's own, for per_sample())


def _mean(t: Tensor) -> float:
    return t.double().mean().item() if len(t) else float("nan")


def _curve(rows: Tensor) -> list[float]:
    """The mean curve over the samples where it is defined (a (n, L) table of per-sample curves)."""
    ok = ~rows.isnan().any(-1)
    return rows[ok].mean(0).tolist() if ok.any() else [float("nan")] * rows.shape[-1]


def _summarise(per: dict[str, Tensor], common: dict[str, Tensor], stages: Sequence[str]) -> MethodScores:
    degenerate = common["degenerate"]
    rho = per["rho"].masked_fill(degenerate, float("nan"))  # ρ says nothing there (docs/metrics.md): undefined
    mean, std, n, undefined = nan_summary(rho)
    d1_m, or_m, ra_m = (_mean(t) for t in (per["d1"], common["oracle"], common["random"]))
    s = MethodScores(
        mean,
        std,
        n,
        undefined,
        d1_m,
        or_m,
        ra_m,
        normalised_deletion(d1_m, or_m, ra_m),
        degenerate=int(degenerate.sum()),
    )
    s.aopc, s.aopc_std, _, s.aopc_undefined = nan_summary(per["aopc"])
    s.deletion_curve, s.insertion_curve = _curve(per["deletion_curve"]), _curve(per["insertion_curve"])
    ok = ~per["sufficiency"].isnan()
    s.sufficiency_undefined = int((~ok).sum())
    s.sufficiency, s.sufficiency_oracle, s.sufficiency_random = (
        _mean(t[ok]) for t in (per["sufficiency"], common["keep_oracle"], common["keep_random"])
    )
    s.sufficiency_normalised = normalised_deletion(s.sufficiency, s.sufficiency_oracle, s.sufficiency_random)
    if "completeness_error" in per:
        s.completeness, s.completeness_error, s.completeness_effect = completeness(
            per["completeness_error"], per["completeness_effect"]
        )
    checked = common["checked"]  # the samples of the model-randomisation check
    for k, stage in enumerate(stages):
        rho, _, _, undef = nan_summary(per[f"randomised{k}"][checked])
        s.randomisation_cascade.append({"stage": stage, "spearman": rho, "undefined": undef})
    if stages:
        last = s.randomisation_cascade[-1]
        s.randomisation_spearman, s.randomisation_undefined = last["spearman"], last["undefined"]
        s.randomisation = 1 - s.randomisation_spearman
    return s


def _unavailable(n: int, common: dict[str, Tensor], note: str, n_layers: int, stages: Sequence[str]) -> MethodScores:
    nan = float("nan")
    or_m, ra_m = _mean(common["oracle"]), _mean(common["random"])
    checked = int(common["checked"].sum()) if stages else 0
    return MethodScores(
        nan,
        nan,
        0,
        n,
        nan,
        or_m,
        ra_m,
        nan,
        available=False,
        note=note,
        aopc_undefined=n,
        deletion_curve=[nan] * n_layers,
        sufficiency_undefined=n,
        sufficiency_oracle=_mean(common["keep_oracle"]),
        sufficiency_random=_mean(common["keep_random"]),
        insertion_curve=[nan] * n_layers,
        randomisation_undefined=checked,
        randomisation_cascade=[{"stage": st, "spearman": nan, "undefined": checked} for st in stages],
    )


def _scores(methods, per, common, reasons, n_layers, stages, rows=None) -> dict[str, MethodScores]:
    pick = (lambda t: t) if rows is None else (lambda t: t[rows])
    common = {k: pick(v) for k, v in common.items()}
    n = len(common["oracle"])
    return {
        m: (
            _unavailable(n, common, reasons[m], n_layers, stages)
            if reasons[m]
            else _summarise({k: pick(v) for k, v in per[m].items()}, common, stages)
        )
        for m in methods
    }


def _features(eval_data):
    return eval_data.features if hasattr(eval_data, "features") else eval_data


def _row_keys(method: str, n_stages: int) -> list[str]:
    """The per-sample numbers run_audit keeps for one method."""
    keys = ["rho", "d1", "scores", "aopc", *_CURVES, "sufficiency"]
    if method in CONVERGENCE:
        keys += ["completeness_error", "completeness_effect"]
    return keys + [f"randomised{k}" for k in range(n_stages)]


def _mean_alpha(heads: Sequence, feats, bs: int, start: int, stop: int, n: int, n_layers: int, dev) -> list[Tensor]:
    """The ``global`` weights of each head: its mean α over the whole audited set (a forward-only pass).

    Per-batch sums are gathered from every rank and added in batch order, so the weights are
    bit-identical to a one-process run.
    """
    sums: list[list[Tensor]] = [[] for _ in heads]
    n_batches = (stop - start + bs - 1) // bs
    for xs, _ in track(feature_batches(feats, bs, start, stop), "global weights", total=n_batches):
        x = [t.to(dev).float() for t in xs]
        for j, h in enumerate(heads):
            sums[j].append(laya_attention(h, x).cpu().double().sum(0, keepdim=True))
    return [(gathered_sum(rows, n_layers) / n).float().to(dev) for rows in sums]


def _replayed(state: Tensor) -> torch.Generator:
    g = torch.Generator()
    g.set_state(state)
    return g


def _method_rows(
    m, head, x, ctx, stage_heads, stage_ctxs, delta, keep, keys, base, effect, lolo_ref, ablation
) -> dict[str, Tensor]:
    """One method on one batch: its per-sample numbers (float64, on the CPU)."""
    out = {}
    if m in CONVERGENCE:
        a, conv = CONVERGENCE[m](head, x, ctx)
        out["completeness_error"] = conv.detach().abs().double().cpu()
        out["completeness_effect"] = effect
    else:
        a = METHODS[m](head, x, ctx)
    a = a.cpu()  # the (B, L) score tables go to the CPU for the float64 metrics (MPS has no float64)
    bad = a.isnan().any(-1)  # no ranking: the curves and sufficiency are undefined there
    out["rho"] = spearman_rows(a, delta)
    out["d1"] = deletion_at_1(a, delta)[0]
    out["scores"] = a.double()
    order = rank_layers(a, keys).to(base.device)
    for key, fn in (("deletion_curve", deletion_curve), ("insertion_curve", insertion_curve)):
        extra = {"base": base} if fn is deletion_curve else {}
        out[key] = (
            fn(head, x, ctx.target, order, lolo_ref, ablation, **extra)
            .cpu()
            .double()
            .masked_fill(bad.unsqueeze(-1), float("nan"))
        )
    out["aopc"] = aopc(out["deletion_curve"])
    out["sufficiency"] = deletion_at_1(a, keep)[0].masked_fill(bad, float("nan"))
    for k, (h, c) in enumerate(zip(stage_heads, stage_ctxs)):
        out[f"randomised{k}"] = spearman_rows(a, METHODS[m](h, x, c).cpu())
    return out


def run_audit(model, eval_data, methods: Sequence[str], settings: AuditSettings | None = None) -> AuditResult:
    """Audit ``model`` (a LayaModel) on ``eval_data`` (EvalData, LayerFeatures or StreamedFeatures).

    ``methods``: names from ``attribution.METHODS`` (see ``parse_methods``). Methods a head
    cannot support (``laya`` on a ``last`` head, say) are reported as undefined, not raised.

    Streams in batches of ``settings.batch_size`` and keeps only a few numbers per sample. Under
    torchrun each rank audits its own contiguous whole batches (so every batch, and every number,
    is the one a single process computes) and the per-sample results are gathered on every rank,
    which all compute the same summary. ``model`` is never modified: the model-randomisation
    check re-initialises copies of its head.
    """
    settings = (settings or AuditSettings()).validate()
    feats = _features(eval_data)
    head, dev, n_layers = model.head, settings.device, num_layers(feats)
    head.eval().to(dev)
    methods = list(dict.fromkeys(match_choice("method", m, METHODS) for m in methods))
    n = len(feats)
    if n == 0:
        raise LayaError("nothing to audit: the data set has no samples")
    check_ablation(head, settings.ablation)
    reasons = {m: unavailable_reason(m, head) for m in methods}
    active = [m for m in methods if not reasons[m]]
    kind = head_kind(head)

    # What "removing" a layer means, and the IG baseline r̄ (mask has no input-space reference:
    # IG then uses the checkpoint's mean features).
    mean_ref = [r.to(dev).float() for r in model.reference] if model.reference is not None else None
    lolo_ref = None if settings.ablation == "zero" else mean_ref
    baseline = [torch.zeros_like(r) for r in mean_ref] if settings.ablation == "zero" and mean_ref else mean_ref

    bs = settings.batch_size
    start, stop = shard_bounds(n, bs)
    generator = torch.Generator().manual_seed(settings.seed)
    ties = torch.Generator().manual_seed(settings.seed + _TIE_SEED)  # tie-breaking of the curves' rankings
    for s in range(0, start, bs):  # replay the draws of earlier ranks' batches: same numbers as 1 process
        if "random" in active:
            random_scores(min(bs, n - s), n_layers, generator)
        random_scores(min(bs, n - s), n_layers, ties)
    # The model-randomisation check: copies of the head re-initialised from the classifier down
    # (cascading), seeded; the loaded head is never touched. It runs on the first
    # ``randomisation_samples`` rows, rounded up to whole batches (so ``random`` replays its draws).
    check_stop = min(n, -(-settings.randomisation_samples // bs) * bs)
    stages = cascade_stages(head) if check_stop else []
    stage_heads = [randomised_copy(head, k + 1, settings.seed) for k in range(len(stages))]
    # ``global`` = mean α over the whole audited set, for the head and each randomised copy.
    weights = (
        _mean_alpha([head, *stage_heads], feats, bs, start, stop, n, n_layers, dev)
        if "global" in active
        else [None] * (1 + len(stages))
    )
    need_effect = any(m in CONVERGENCE for m in active)

    per = {m: {k: [] for k in _row_keys(m, len(stages))} for m in active}
    common = {
        k: [] for k in ("oracle", "random", "keep_oracle", "keep_random", "checked", "degenerate", "delta", "target")
    }
    preds, labels = [], []
    n_batches = (stop - start + bs - 1) // bs
    for b, (xs, y) in enumerate(track(feature_batches(feats, bs, start, stop), "auditing", total=n_batches)):
        check = start + b * bs < check_stop
        x, y = [t.to(dev).float() for t in xs], y.to(dev)
        with torch.no_grad():
            logits = head(x).logits
        pred = logits.argmax(-1)
        target = pred if settings.target == "predicted" else y
        base = target_probability(logits, target)
        delta = lolo_effects(head, x, target, lolo_ref, settings.ablation).cpu()
        keep = keep_only_probability(head, x, target, lolo_ref, settings.ablation).cpu()
        keys = random_scores(len(y), n_layers, ties)
        effect = None
        if need_effect:  # |p_ŷ(x) − p_ŷ(r̄)|: what IG's attributions should add up to
            at_ref = (
                [torch.zeros_like(r) for r in x] if baseline is None else [b.expand_as(r) for b, r in zip(baseline, x)]
            )
            with torch.no_grad():
                effect = (base - target_probability(head(at_ref).logits, target)).abs().double().cpu()
        state = generator.get_state()  # ``random`` on a randomised head draws the very same scores
        ctx = AttributionContext(
            target, baseline, settings.steps, settings.internal_batch_size, settings.reduce, generator, weights[0]
        )
        stage_ctxs = [
            AttributionContext(
                target, baseline, settings.steps, settings.internal_batch_size, settings.reduce, _replayed(state), w
            )
            for w in weights[1:]
        ]
        for m in active:
            rows = _method_rows(
                m,
                head,
                x,
                ctx,
                stage_heads if check else [],
                stage_ctxs,
                delta,
                keep,
                keys,
                base,
                effect,
                lolo_ref,
                settings.ablation,
            )
            for k in range(len(stages) if not check else 0):
                rows[f"randomised{k}"] = torch.full((len(y),), float("nan"), dtype=torch.float64)
            for k, v in rows.items():
                per[m][k].append(v)
        common["checked"].append(torch.full((len(y),), check))
        common["degenerate"].append(degenerate_effects(delta))
        common["delta"].append(delta.double())
        common["target"].append(target.cpu().double())
        for (hi, mean_), t in (
            ((common["oracle"], common["random"]), delta),
            ((common["keep_oracle"], common["keep_random"]), keep),
        ):
            _, top, avg = deletion_at_1(t, t)
            hi.append(top)
            mean_.append(avg)
        preds.append(pred.cpu())
        labels.append(y.cpu())

    # Back in the original order, on every rank (a no-op without torchrun).
    preds, labels = gather_rows([cat_rows(preds, torch.long), cat_rows(labels, torch.long)], n)
    flags = ("checked", "degenerate")  # gathered as uint8: every backend gathers it
    common = {
        k: gather_rows(cat_rows(v, torch.bool).to(torch.uint8), n).bool()
        if k in flags
        else gather_rows(cat_rows(v, width=n_layers if k == "delta" else None), n)
        for k, v in common.items()
    }
    per = {
        m: {k: gather_rows(cat_rows(v, width=n_layers if k in _WIDE else None), n) for k, v in rows.items()}
        for m, rows in per.items()
    }
    result = AuditResult(
        settings={
            **asdict(settings),
            "methods": methods,
            "head": kind,
            "dataset": getattr(eval_data, "dataset", None),
            "layers": n_layers,
        },
        n_samples=len(labels),
        accuracy=accuracy(preds, labels),
        layers=list(getattr(model, "layer_names", None) or [f"layer{i}" for i in range(n_layers)]),
        methods=_scores(methods, per, common, reasons, n_layers, stages),
        randomisation_stages=stages,
        randomisation_samples=int(common["checked"].sum()) if stages else 0,
    )
    result.notes = _notes(methods, reasons, n_layers, kind, settings, result.methods)
    result.notes += _warnings(
        result, labels, len(getattr(model, "classes", None) or []), int(common["degenerate"].sum())
    )
    index = getattr(eval_data, "index", None)
    result.samples = {
        "index": torch.as_tensor(index).long() if index is not None else torch.arange(n),
        "label": labels,
        "predicted": preds,
        "target": common["target"].long(),
        "delta": common["delta"].float(),
        # ρ is undefined (NaN) where every Δ is equal, as in the summary (docs/metrics.md)
        "scores": {m: per[m]["scores"] for m in active},
        "faithfulness": {m: per[m]["rho"].masked_fill(common["degenerate"], float("nan")) for m in active},
        "deletion@1": {m: per[m]["d1"] for m in active},
    }
    if settings.by_class:
        classes = list(getattr(model, "classes", None) or [])
        result.by_class = {}
        for c in labels.unique(sorted=True).tolist():
            rows = labels == c
            name = classes[c] if c < len(classes) else str(c)
            result.by_class[name] = ClassScores(
                int(rows.sum()),
                accuracy(preds[rows], labels[rows]),
                _scores(methods, per, common, reasons, n_layers, stages, rows),
            )
    return result


def _notes(
    methods, reasons, n_layers, kind, settings: AuditSettings, scores: dict[str, MethodScores] | None = None
) -> list[str]:
    notes = [f"{m}: {reasons[m]}" for m in methods if reasons[m]]
    if n_layers == 1:
        notes.append(
            "only 1 layer: faithfulness (a rank correlation over layers) is undefined for every sample, "
            "and Deletion@1 equals its oracle and random expectation"
        )
    elif n_layers < 3:
        notes.append(
            f"only {n_layers} layers: faithfulness (Spearman over {n_layers} values) can only be ±1 "
            "and means little; tap at least 3 layers"
        )
    if kind == "last":
        notes.append("the last head reads only the last layer: removing any other layer changes nothing (Δ_i = 0)")
    if kind == "scalarmix" and "laya" in methods:
        notes.append("on a scalarmix head, laya's α is the static softmax(w), the same for every sample")
    if settings.ablation == "mask" and "ig" in methods:
        notes.append(
            "--ablation mask has no input-space reference: IG uses the mean training features r̄ as its baseline"
        )
    if settings.randomisation_samples == 0:
        notes.append("model-randomisation check skipped (--randomisation-samples 0)")
    for m, s in (scores or {}).items():
        if s.completeness_flagged:
            notes.append(
                f"{m}: completeness {s.completeness:.3f} < {COMPLETENESS_FLAG:g}: its attributions miss "
                f"{100 * (1 - s.completeness):.1f} % of the effect they explain (Captum's convergence "
                f"delta); raise --steps (now {settings.steps})"
            )
        if s.randomisation_flagged and m != "random":  # random is model-independent by construction
            notes.append(
                f"{m}: model-randomisation check: its layer scores keep Spearman "
                f"{s.randomisation_spearman:.2f} with those of the re-initialised head (randomisation "
                f"{s.randomisation:.2f} < {RANDOMISATION_FLAG:g}): they barely depend on the head's parameters"
            )
    return notes


def _warnings(result: AuditResult, labels: Tensor, num_classes: int, degenerate: int) -> list[str]:
    """What makes the numbers above read as a finding when they are not one (docs/metrics.md)."""
    out = []
    n = result.n_samples
    classes = max(num_classes, int(labels.max()) + 1 if len(labels) else 0)
    chance = chance_level(labels, classes) if classes else float("nan")
    if near_chance(result.accuracy, chance, n):
        out.append(
            f"warning: accuracy {result.accuracy:.3f} on {n} samples is within noise of chance "
            f"({chance:.3f}, {classes} classes): the model has learnt little, so no attribution of its "
            f"decisions (faithfulness or Deletion@1, of any method) means much"
        )
    if degenerate:
        every = degenerate == n
        out.append(
            f"faithfulness is degenerate on {'all ' if every else ''}{degenerate} of {n} samples: removing "
            f"any layer but one changes nothing there (Δ varies in at most one layer), so a rank "
            f"correlation over layers measures nothing; they count as undefined"
            + (" and faithfulness is undefined for every method" if every else "")
        )
    return out
