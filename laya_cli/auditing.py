"""``laya audit``: run attribution methods and faithfulness metrics over a data set, and gate on them.

``run_audit`` streams the audited features through the head in batches: per batch, one
forward (predictions, target ŷ), the LOLO effects Δ (L+1 head passes), and each method's
(B, L) scores; per sample it keeps only a few numbers (ρ, Deletion@1, oracle, random, and the
L effects Δ when ``global`` is audited), so memory does not grow with the feature width.
Under torchrun the batches are sharded over the ranks (docs/scaling.md). Definitions:
docs/metrics.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from .attribution import METHODS, AttributionContext, global_weights, laya_attention, random_scores, unavailable_reason
from .config import AuditSettings
from .distributed import gather_rows, shard_bounds
from .features import feature_batches, num_layers
from .errors import LayaError, unknown_choice
from .fileio import json_safe, strict_json
from .heads import head_kind
from .metrics import (accuracy, check_ablation, deletion_at_1, lolo_effects, nan_summary,
                      normalised_deletion, spearman_rows)
from .progress import track

ALWAYS = ("laya", "random")
COMPARE = ("ig", "gradxact", "saliency", "contrib", "global")
METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")  # per method, higher is better
GLOBAL_METRICS = ("accuracy",)


def parse_methods(compare: str | Sequence[str] | None) -> list[str]:
    """``laya``, the compared methods in the order given (``all`` = every one), then ``random``."""
    names = compare.split(",") if isinstance(compare, str) else list(compare or [])
    chosen: list[str] = []
    for name in (n.strip() for n in names):
        if not name:
            continue
        expanded = COMPARE if name == "all" else (name,)
        for m in expanded:
            if m in ALWAYS:
                continue  # always audited
            if m not in COMPARE:
                raise unknown_choice("method", m, [*COMPARE, "all"])
            if m not in chosen:
                chosen.append(m)
    return ["laya", *chosen, "random"]


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

    def metric(self, name: str) -> float:
        return {"faithfulness": self.faithfulness, "deletion@1": self.deletion_at_1,
                "deletion@1_normalised": self.normalised}[name]

    def to_dict(self) -> dict:
        return {"faithfulness": self.faithfulness, "faithfulness_std": self.faithfulness_std,
                "undefined": self.undefined, "defined": self.defined, "deletion@1": self.deletion_at_1,
                "deletion@1_oracle": self.oracle, "deletion@1_random": self.random,
                "deletion@1_normalised": self.normalised, "available": self.available, "note": self.note}


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
    network: object | None = None  # --scope network|both: a network.NetworkResult (docs/metrics.md)

    def to_dict(self) -> dict:
        out = {"settings": self.settings, "n_samples": self.n_samples, "accuracy": self.accuracy,
               "layers": self.layers, "methods": {m: s.to_dict() for m, s in self.methods.items()},
               "notes": self.notes}
        if self.by_class is not None:
            out["by_class"] = {c: s.to_dict() for c, s in self.by_class.items()}
        if self.network is not None:
            out["network"] = self.network.to_dict()
            if not self.methods:  # --scope network: no head-scope results
                del out["methods"]
        return json_safe(out)

    def to_json(self) -> str:
        """Strict JSON (NaN and ±inf written as null)."""
        return strict_json(self.to_dict())


# --------------------------------------------------------------------------- the run


def _summarise(rho: Tensor, d1: Tensor, oracle: Tensor, random: Tensor) -> MethodScores:
    mean, std, n, undefined = nan_summary(rho)
    d1_m, or_m, ra_m = (t.double().mean().item() if len(t) else float("nan") for t in (d1, oracle, random))
    return MethodScores(mean, std, n, undefined, d1_m, or_m, ra_m, normalised_deletion(d1_m, or_m, ra_m))


def _unavailable(n: int, oracle: Tensor, random: Tensor, note: str) -> MethodScores:
    nan = float("nan")
    or_m, ra_m = (t.double().mean().item() if len(t) else nan for t in (oracle, random))
    return MethodScores(nan, nan, 0, n, nan, or_m, ra_m, nan, available=False, note=note)


def _scores(methods, rho, d1, oracle, random, reasons, rows=None) -> dict[str, MethodScores]:
    pick = (lambda t: t) if rows is None else (lambda t: t[rows])
    n = len(pick(oracle))
    return {m: (_unavailable(n, pick(oracle), pick(random), reasons[m]) if reasons[m]
                else _summarise(pick(rho[m]), pick(d1[m]), pick(oracle), pick(random))) for m in methods}


def _features(eval_data):
    return eval_data.features if hasattr(eval_data, "features") else eval_data


def run_audit(model, eval_data, methods: Sequence[str], settings: AuditSettings | None = None) -> AuditResult:
    """Audit ``model`` (a LayaModel) on ``eval_data`` (EvalData, LayerFeatures or StreamedFeatures).

    ``methods``: names from ``attribution.METHODS`` (see ``parse_methods``). Methods a head
    cannot support (``laya`` on a ``last`` head, say) are reported as undefined, not raised.

    Streams in batches of ``settings.batch_size`` and keeps only a few numbers per sample. Under
    torchrun each rank audits its own contiguous whole batches (so every batch, and every number,
    is the one a single process computes) and the per-sample results are gathered on every rank,
    which all compute the same summary.
    """
    settings = (settings or AuditSettings()).validate()
    feats = _features(eval_data)
    head, dev, n_layers = model.head, settings.device, num_layers(feats)
    head.eval().to(dev)
    methods = list(dict.fromkeys(methods))
    for m in methods:
        if m not in METHODS:
            raise unknown_choice("method", m, METHODS)
    n = len(feats)
    if n == 0:
        raise LayaError("nothing to audit: the data set has no samples")
    check_ablation(head, settings.ablation)
    reasons = {m: unavailable_reason(m, head) for m in methods}
    kind = head_kind(head)

    # What "removing" a layer means, and the IG baseline r̄ (mask has no input-space reference:
    # IG then uses the checkpoint's mean features).
    mean_ref = [r.to(dev).float() for r in model.reference] if model.reference is not None else None
    lolo_ref = None if settings.ablation == "zero" else mean_ref
    baseline = [torch.zeros_like(r) for r in mean_ref] if settings.ablation == "zero" and mean_ref else mean_ref

    bs = settings.batch_size
    start, stop = shard_bounds(n, bs)
    generator = torch.Generator().manual_seed(settings.seed)
    if "random" in methods and not reasons["random"]:
        for s in range(0, start, bs):  # replay the draws of earlier ranks' batches: same numbers as 1 process
            random_scores(min(bs, n - s), n_layers, generator)
    # ``global`` = mean α over the whole audited set: accumulated per batch (α sums) during the
    # pass, then scored against the kept Δ rows once the mean is known (no second pass).
    want_global = "global" in methods and not reasons["global"]
    alpha_sums, deltas = [], []

    preds, labels, oracle, random = [], [], [], []
    rho = {m: [] for m in methods}
    d1 = {m: [] for m in methods}
    n_batches = (stop - start + bs - 1) // bs
    for xs, y in track(feature_batches(feats, bs, start, stop), "auditing", total=n_batches):
        x, y = [t.to(dev).float() for t in xs], y.to(dev)
        with torch.no_grad():
            pred = head(x).logits.argmax(-1)
        target = pred if settings.target == "predicted" else y
        # The (B, L) score tables go to the CPU for the float64 metrics (MPS has no float64).
        delta = lolo_effects(head, x, target, lolo_ref, settings.ablation).cpu()
        ctx = AttributionContext(target, baseline, settings.steps, settings.internal_batch_size, settings.reduce,
                                 generator, None)
        for m in methods:
            if reasons[m] or m == "global":
                continue
            a = METHODS[m](head, x, ctx).cpu()
            rho[m].append(spearman_rows(a, delta))
            d1[m].append(deletion_at_1(a, delta)[0])
        if want_global:
            alpha_sums.append(laya_attention(head, x).cpu().double().sum(0, keepdim=True))
            deltas.append(delta)
        _, o, r = deletion_at_1(delta, delta)
        oracle.append(o)
        random.append(r)
        preds.append(pred.cpu())
        labels.append(y.cpu())

    def cat(ts, dtype=torch.float64, width=None):
        if ts:
            return torch.cat(ts)
        return torch.empty((0,) if width is None else (0, width), dtype=dtype)

    # Back in the original order, on every rank (a no-op without torchrun).
    preds, labels = gather_rows([cat(preds, torch.long), cat(labels, torch.long)], n)
    oracle, random = gather_rows([cat(oracle), cat(random)], n)
    rho = {m: gather_rows(cat(v), n) if not reasons[m] and m != "global" else cat(v) for m, v in rho.items()}
    d1 = {m: gather_rows(cat(v), n) if not reasons[m] and m != "global" else cat(v) for m, v in d1.items()}
    if want_global:
        sums = gather_rows(cat(alpha_sums, width=n_layers))
        total = None
        for row in sums:  # sequential, in batch order: bit-identical to a one-process run
            total = row if total is None else total + row
        global_w = (total / n).float()
        delta_all = gather_rows(cat(deltas, torch.float32, n_layers), n)
        a = global_weights(global_w, n)
        rho["global"], d1["global"] = spearman_rows(a, delta_all), deletion_at_1(a, delta_all)[0]
    result = AuditResult(
        settings={**asdict(settings), "methods": methods, "head": kind,
                  "dataset": getattr(eval_data, "dataset", None), "layers": n_layers},
        n_samples=len(labels), accuracy=accuracy(preds, labels),
        layers=list(getattr(model, "layer_names", None) or [f"layer{i}" for i in range(n_layers)]),
        methods=_scores(methods, rho, d1, oracle, random, reasons),
        notes=_notes(methods, reasons, n_layers, kind, settings),
    )
    if settings.by_class:
        classes = list(getattr(model, "classes", None) or [])
        result.by_class = {}
        for c in labels.unique(sorted=True).tolist():
            rows = labels == c
            name = classes[c] if c < len(classes) else str(c)
            result.by_class[name] = ClassScores(int(rows.sum()), accuracy(preds[rows], labels[rows]),
                                                _scores(methods, rho, d1, oracle, random, reasons, rows))
    return result


def _notes(methods, reasons, n_layers, kind, settings: AuditSettings) -> list[str]:
    notes = [f"{m}: {reasons[m]}" for m in methods if reasons[m]]
    if n_layers == 1:
        notes.append("only 1 layer: faithfulness (a rank correlation over layers) is undefined for every sample, "
                     "and Deletion@1 equals its oracle and random expectation")
    elif n_layers < 3:
        notes.append(f"only {n_layers} layers: faithfulness (Spearman over {n_layers} values) can only be ±1 "
                     "and means little; tap at least 3 layers")
    if kind == "last":
        notes.append("the last head reads only the last layer: removing any other layer changes nothing (Δ_i = 0)")
    if kind == "scalarmix" and "laya" in methods:
        notes.append("on a scalarmix head, laya's α is the static softmax(w), the same for every sample")
    if settings.ablation == "mask" and "ig" in methods:
        notes.append("--ablation mask has no input-space reference: IG uses the mean training features r̄ "
                     "as its baseline")
    return notes


# --------------------------------------------------------------------------- gating

_THRESHOLD = re.compile(r"^(?:(?P<scope>network):)?(?:(?P<method>[\w@.-]+):)?(?P<metric>[\w@.-]+)=(?P<value>[^=]+)$")
THRESHOLD_SYNTAX = ("METRIC=VALUE or METHOD:METRIC=VALUE, comma-separated (e.g. faithfulness=0.7,ig:deletion@1=0.2); "
                    "prefix network: for the network scope")


@dataclass(frozen=True)
class Threshold:
    metric: str
    value: float
    method: str | None = None  # None: every audited method except random (and accuracy: global)
    scope: str = "head"  # "network": the network-scope results (``network:`` prefix)

    def __str__(self) -> str:
        prefix = "network:" if self.scope == "network" else ""
        return f"{prefix}{self.method + ':' if self.method else ''}{self.metric}={self.value:g}"


def parse_thresholds(spec: str | Sequence[str] | None, methods: Sequence[str] | None = None,
                     scope: str = "head") -> list[Threshold]:
    """Parse ``--fail-under`` specs; with ``methods``, also check they name audited methods.
    ``scope``: the audit's ``--scope`` (a ``network:`` item needs network or both; with network
    alone an item without the prefix is a usage error, since no head-scope results exist)."""
    parts = [spec] if isinstance(spec, str) else list(spec or [])
    items = [p.strip() for s in parts for p in s.split(",") if p.strip()]
    out = []
    for item in items:
        m = _THRESHOLD.match(item.replace(" ", ""))
        if not m:
            raise LayaError(f"bad --fail-under '{item}': expected {THRESHOLD_SYNTAX}")
        method, metric, raw = m.group("method"), m.group("metric").lower(), m.group("value")
        where = "network" if m.group("scope") else "head"
        if metric not in GLOBAL_METRICS:
            if where == "network" and scope == "head":
                raise LayaError(f"--fail-under {item} checks the network scope; add --scope network or --scope both")
            if where == "head" and scope == "network":
                raise LayaError(f"--fail-under {item} checks the head scope, which --scope network does not audit; "
                                f"write network:{item}")
        try:
            value = float(raw)
        except ValueError:
            raise LayaError(f"bad --fail-under '{item}': '{raw}' is not a number") from None
        if not math.isfinite(value):
            raise LayaError(f"bad --fail-under '{item}': the threshold must be a finite number")
        if metric in GLOBAL_METRICS:
            if method:
                raise LayaError(f"bad --fail-under '{item}': {metric} belongs to the model, not to a method; "
                                f"write {metric}={raw}")
        elif metric not in METRICS:
            raise unknown_choice("--fail-under metric", metric, [*METRICS, *GLOBAL_METRICS])
        if method is not None:
            if method not in (*ALWAYS, *COMPARE):
                raise unknown_choice("--fail-under method", method, [*ALWAYS, *COMPARE])
            if methods is not None and method not in methods:
                raise LayaError(f"--fail-under {item} names {method}, which is not audited; add --compare {method}")
        out.append(Threshold(metric, value, method, where if metric not in GLOBAL_METRICS else "head"))
    return out


def check_thresholds(result: AuditResult, thresholds: Sequence[Threshold]) -> list[str]:
    """One message per miss (a value below its threshold, or undefined where a value was required)."""
    misses = []
    for t in thresholds:
        if t.metric in GLOBAL_METRICS:
            value = result.accuracy
            if not value >= t.value:
                misses.append(f"{t.metric} {value:.4f} < {t.value:g}")
            continue
        scored = result.network.methods if t.scope == "network" and result.network is not None else result.methods
        if t.method is not None:
            targets = [t.method]
        else:
            targets = [m for m, s in scored.items() if m != "random" and s.available]
        for m in targets:
            scores = scored.get(m)
            m = f"network:{m}" if t.scope == "network" else m
            if scores is None:
                misses.append(f"{m}: not audited (required by --fail-under {t})")
            elif not scores.available:
                misses.append(f"{m}: {t.metric} is {scores.note} (required by --fail-under {t})")
            elif math.isnan(value := scores.metric(t.metric)):
                misses.append(f"{m}: {t.metric} is undefined on this data (required by --fail-under {t})")
            elif value < t.value:
                misses.append(f"{m}: {t.metric} {value:.4f} < {t.value:g}")
    return misses
