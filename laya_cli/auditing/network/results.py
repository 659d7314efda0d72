"""What a network-scope audit reports: per method its faithfulness and Deletion@1 against the total effects (the
head scope's ``MethodScores``, with only the keys computed here), and, for ``--scope both``, the comparison of the
two scopes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..metrics import nan_summaries, nan_summary, normalised_deletion, row_means
from ..names import NETWORK_METRICS
from ..plan import AuditPlan
from ..results import MethodScores

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
    "reference",  # computes the effect itself another way (auditing/verdict.py)
)
assert set(NETWORK_METRICS) <= set(NETWORK_KEYS)


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
    ranking: dict | None = None  # whether the total effects differ enough to rank (metrics.ranking_block)

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
        if self.ranking is not None:
            out["ranking"] = self.ranking
        return out


def method_scores(plan: AuditPlan, rho: dict, d1: dict, tie: dict, common: dict) -> dict[str, MethodScores]:
    """Faithfulness and Deletion@1 per method from the per-sample rows, as at head scope (built here,
    with MethodScores' own fields, so that the head scope's summaries can grow without touching this).
    ``common["degenerate"]``: the samples whose total effects vary in at most one layer; their ρ is
    undefined, as at head scope; ``tie``: per method, the samples undefined only because of the tie tolerance.
    The deeper metrics keep their defaults (not computed here; not in the JSON)."""
    nan = float("nan")
    oracle, random = row_means(torch.stack([common["oracle"], common["random"]]).double())
    degenerate = common["degenerate"]
    n, n_degenerate = len(common["oracle"]), int(degenerate.sum())
    available = [m for m in plan.methods if not plan.reasons[m]]
    first = {}
    if available:  # every method's ρ, Deletion@1 and ties in one set of kernels (the same numbers as one by one)
        table = torch.stack([rho[m] for m in available]).double().masked_fill(degenerate, nan)
        d1s = row_means(torch.stack([d1[m] for m in available]).double())
        ties = torch.stack([tie[m] for m in available]).sum(-1).tolist()
        first = dict(zip(available, zip(nan_summaries(table), d1s, ties)))
    out = {}
    for m in plan.methods:
        if plan.reasons[m]:
            out[m] = MethodScores.unavailable(plan.reasons[m], n, oracle=oracle, random=random, degenerate=n_degenerate)
            continue
        (faithfulness, std, defined, undefined), d, by_ties = first[m]
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
            undefined_by_ties=int(by_ties),
        )
    return out


def _summary(values: Tensor) -> dict:
    mean, std, n, undefined = nan_summary(values)
    return {"spearman": mean, "spearman_std": std, "defined": n, "undefined": undefined}


def scope_comparison(cross: dict[str, Tensor], sums: dict[str, Tensor], n: int, layer_names) -> ScopeComparison:
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
