"""What an audit returns: per method its scores (``MethodScores``), per class (``ClassScores``), and the whole
result (``AuditResult``: the JSON of ``laya audit --json``, pandas tables, the per-sample numbers)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..runtime.errors import LayaError
from ..runtime.fileio import json_safe, strict_json
from ..stats.audit_columns import COMMON
from ..stats.compact import pack
from .flags import audit_flags, chance_rate
from .metrics import COMPLETENESS_FLAG, RANDOMISATION_FLAG
from .names import METRIC_GROUPS, OWN, computed_metrics
from .verdict import audit_verdict

# The JSON keys of each deeper metric group: a method's dict has them only when the group was computed.
GROUP_KEYS = {
    "aopc": ("aopc", "aopc_std", "aopc_undefined", "deletion_curve"),
    "sufficiency": (
        "sufficiency@1",
        "sufficiency@1_oracle",
        "sufficiency@1_random",
        "sufficiency@1_normalised",
        "sufficiency@1_undefined",
        "insertion_curve",
    ),
    "completeness": ("completeness", "completeness_error", "completeness_effect", "completeness_flagged"),
    "randomisation": (
        "randomisation",
        "randomisation_spearman",
        "randomisation_undefined",
        "randomisation_flagged",
        "randomisation_cascade",
    ),
}
assert tuple(GROUP_KEYS) == METRIC_GROUPS


@dataclass(kw_only=True)
class MethodScores:
    """One method's metrics over a set of samples (NaN where undefined). Built by keyword only."""

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
    undefined_by_ties: int = 0  # of the undefined samples: those defined with exact ties (settings.tie_tol)
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
    groups: tuple[str, ...] = METRIC_GROUPS  # the deeper metric groups computed (the others: not in to_dict)
    ig_steps: dict | None = None  # IG's adaptive steps: mean, max, the per-sample histogram (docs/metrics.md)
    # --ci (auditing/intervals.py): metric -> stats.bootstrap.Interval, of this method and of it minus laya
    intervals: dict = field(default_factory=dict)
    vs_laya: dict = field(default_factory=dict)
    # The method computes the effect itself another way (auditing/verdict.py): a check of the audit, not a competitor
    reference: bool = False

    @classmethod
    def unavailable(cls, note: str, n: int, *, oracle: float, random: float, **known) -> MethodScores:
        """A method the head cannot support, on ``n`` samples: its own scores undefined (NaN), the
        method-independent ones kept (Deletion@1's oracle and random expectation; ``known``: any other)."""
        nan = math.nan
        return cls(
            faithfulness=nan,
            faithfulness_std=nan,
            defined=0,
            undefined=n,
            deletion_at_1=nan,
            oracle=oracle,
            random=random,
            normalised=nan,
            available=False,
            note=note,
            **known,
        )

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
        """The method's dict of ``laya audit --json``: the deeper groups' keys only where computed."""
        skipped = {k for g in METRIC_GROUPS if g not in self.groups for k in GROUP_KEYS[g]}
        out = {k: v for k, v in self._fields().items() if k not in skipped}
        if self.ig_steps is not None:
            out["ig_steps"] = self.ig_steps
        return out

    def _fields(self) -> dict:
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
            "undefined_by_ties": self.undefined_by_ties,
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
            "reference": self.reference,
            **_interval_blocks(self.intervals, self.vs_laya),
        }


def flat_row(scores: dict, notes: list[str] = ()) -> dict:
    """A method's ``to_dict`` as one flat row of scalars: ``ci`` as ``METRIC_ci_low``/``_ci_high``/``_n_defined``,
    ``vs_laya`` as ``METRIC_vs_laya`` (the difference) and ``METRIC_vs_laya_ci_low``/``_ci_high``/``_n_defined``,
    ``ig_steps`` as ``ig_steps_mean``/``_max``; lists (the deletion and insertion curves, the randomisation
    cascade, IG's step histogram) left out; ``note`` the method's own note and ``notes``, joined by "; " (None
    without any)."""
    row: dict = {}
    for key, value in scores.items():
        if key == "ci":
            row.update({f"{metric}_{k}": v for metric, block in value.items() for k, v in block.items()})
        elif key == "vs_laya":
            for metric, block in value.items():
                row[f"{metric}_vs_laya"] = block.get("difference")
                row.update({f"{metric}_vs_laya_{k}": v for k, v in block.items() if k != "difference"})
        elif isinstance(value, dict):
            row.update({f"{key}_{k}": v for k, v in value.items() if not isinstance(v, (list, tuple, dict))})
        elif not isinstance(value, (list, tuple)):
            row[key] = value
    said = [n for n in [scores.get("note"), *notes] if n]
    row["note"] = "; ".join(said) if said else None
    return row


def _interval_blocks(intervals: dict, vs_laya: dict) -> dict:
    """``ci`` (metric -> ci_low, ci_high, n_defined) and ``vs_laya`` (metric -> difference, ci_low, ci_high,
    n_defined), when the audit computed intervals (docs/metrics.md, "Intervals")."""
    if not intervals:
        return {}
    return {
        "ci_level": next(iter(intervals.values())).level,
        "ci": {k: v.to_dict() for k, v in intervals.items()},
        "vs_laya": {k: {"difference": v.estimate, **v.to_dict()} for k, v in vs_laya.items()},
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
    groups: tuple[str, ...] = METRIC_GROUPS  # the deeper metric groups computed (settings.metrics)
    memory: dict | None = None  # the memory budget, estimate and measured peak (auditing/budget.py)
    # Per available method its per-sample columns (auditing/intervals.py), written compactly to the JSON's
    # "per_sample" so a --baseline gate can pair samples; the bootstrap's level, resamples and seed (--ci).
    columns: dict | None = field(default=None, repr=False)
    interval_settings: dict = field(default_factory=dict)
    ties: dict | None = None  # the tie tolerance and what it made undefined (``ties_block``)
    class_names: list[str] = field(default_factory=list, repr=False)  # the model's classes (label i -> name)
    # How much of the depth α uses over the audited samples (``collapse.collapse_summary``); None: no α
    alpha_collapse: dict | None = None
    # A language model's audit (auditing/lm.py): per scope, faithfulness and Deletion@1 by position in the block
    by_position: dict | None = None
    # Whether the layers' effects differ enough to rank (``metrics.ranking_block``); None: an audit from before
    ranking: dict | None = None
    # The question α was trained on (auditing/question.py: scope, removal, how it is known, its sentence); None: not
    # known (an audit of a model in memory)
    question: dict | None = None
    # The accuracy of guessing where no head-scope samples hold the labels (``--scope network``: its own labels';
    # ``_chance``); None: not known
    chance: float | None = None

    def __repr__(self) -> str:
        """The terminal's tables as plain text, at a terminal's width (report/notebook.py)."""
        from ..report.notebook import audit_text

        return audit_text(self)

    def _repr_html_(self) -> str:
        """Jupyter's display: report.html's tables (intervals included) and the class × layer picture."""
        from ..report.notebook import audit_html

        return audit_html(self)

    def class_layer(self):
        """The class × layer picture's numbers: (matrix C × L, row labels with their counts, what it shows) —
        mean α per true class and layer where ``laya`` was audited, else the mean LOLO effect Δ; None without
        per-sample results."""
        import numpy as np

        s = self.samples
        if s is None or not len(s["label"]):
            return None
        own = self.methods.get(OWN)  # the head's α
        alpha = own is not None and own.available and OWN in s["scores"]
        values = (s["scores"][OWN] if alpha else s["delta"]).double().cpu().numpy()
        labels = s["label"].cpu().numpy()
        classes = sorted({int(c) for c in labels})
        names = self.class_names
        rows = [f"{names[c] if c < len(names) else c} (n={int((labels == c).sum()):,})" for c in classes]
        return np.stack([values[labels == c].mean(0) for c in classes]), rows, "mean α" if alpha else "mean Δ"

    @property
    def summary(self) -> dict:
        """The JSON document of ``laya audit --json`` (without its ``fail_under`` block), as a dict."""
        return self.to_dict()

    def to_pandas(self, by_class: bool = False):
        """One row per method: faithfulness (mean ρ, std, defined/undefined samples) and Deletion@1
        (value, oracle, random expectation, normalised), a column per number (``flat_row``: with ``ci``, e.g.
        ``faithfulness_ci_low``, ``faithfulness_vs_laya``; the curves are in ``summary``); ``note``: the method's
        own note and the audit's notes about it (``notes_of``). ``by_class``: one row per (class, method). An audit of
        the network scope alone (its question, or ``scope="network"``) has no head-scope method: its network scope's
        rows."""
        import pandas as pd

        def rows(methods: dict[str, MethodScores], **extra) -> list[dict]:
            return [{**extra, "method": m, **flat_row(s.to_dict(), self.notes_of(m))} for m, s in methods.items()]

        if by_class:
            if self.by_class is None:
                raise LayaError("this audit has no per-class results: run it with by_class=True")
            data = [r for c, cs in self.by_class.items() for r in rows(cs.methods, **{"class": c, "n": cs.n})]
            return pd.DataFrame(data).set_index(["class", "method"])
        network_only = not self.methods and self.network is not None
        return pd.DataFrame(rows(self.network.methods if network_only else self.methods)).set_index("method")

    def references(self) -> dict[str, list[str]]:
        """The references each scope ran (methods computing the effect itself: ``verdict.is_reference``): IG at the
        head scope, and at the network scope only where ``--compare`` named it (``settings.network_methods``)."""
        scopes = {"head": self.methods, "network": self.network.methods if self.network is not None else {}}
        return {s: [m for m, v in ms.items() if getattr(v, "reference", False)] for s, ms in scopes.items() if ms}

    def notes_of(self, method: str) -> list[str]:
        """The audit's notes that concern ``method``: those about α (its collapse, a scalarmix's static α) for laya,
        the others (about the effects Δ every method is scored against: degenerate samples, an undetermined ranking)
        for every method."""
        return [n for n in self.notes if method == "laya" or "α" not in n]

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

    def to_dict(self, per_sample: bool = True) -> dict:
        """The audit JSON's document; ``per_sample=False`` leaves out the per-sample block (``--no-per-sample``:
        a smaller file, but no baseline for a paired ``--gate-on bound`` gate)."""
        out = {
            **({"question": self.question} if self.question is not None else {}),
            "settings": self.settings,
            "n_samples": self.n_samples,
            "accuracy": self.accuracy,
            "layers": self.layers,
            "methods": {m: s.to_dict() for m, s in self.methods.items()},
            "notes": self.notes,
            "randomisation_stages": self.randomisation_stages,
            "randomisation_samples": self.randomisation_samples,
            "computed_metrics": computed_metrics(self.groups),
            "alpha_collapse": self.alpha_collapse,  # null for a head without α (docs/metrics.md, "α collapse")
        }
        if self.ranking is not None:
            out["ranking"] = self.ranking  # docs/metrics.md, "An undetermined ranking"
        if self.ties is not None:
            out["ties"] = self.ties
        if self.by_class is not None:
            out["by_class"] = {c: s.to_dict() for c, s in self.by_class.items()}
        if self.network is not None:  # --scope network: "methods" stays, empty (no head-scope results)
            out["network"] = self.network.to_dict()
        if self.by_position is not None:
            out["by_position"] = self.by_position
        out.update(self.memory or {})
        out["references"] = self.references()
        out["flags"] = audit_flags(out, self._chance())  # results that say nothing (auditing/flags.py)
        verdict = audit_verdict(out)  # in words, before the tables (auditing/verdict.py; "verdict": the gates')
        out["verdict_text"], out["verdict_scopes"] = verdict["text"], verdict["scopes"]
        if self.interval_settings:
            out["intervals"] = self.interval_settings
        if self.columns and per_sample:
            out["per_sample"] = per_sample_block(self.columns, self.samples)
        return json_safe(out)

    def _chance(self) -> float | None:
        """The accuracy of guessing on the audited samples (``flags.chance_rate``: a language model's classes are its
        vocabulary, so its rate is the most frequent next token's share): from the head scope's labels, else the rate
        the network scope's gave (``chance``; None: not known)."""
        labels = (self.samples or {}).get("label")
        if labels is None or not self.class_names:
            return self.chance
        return chance_rate(labels.tolist(), len(self.class_names))

    def to_json(self, per_sample: bool = True) -> str:
        """Strict JSON (NaN and ±inf written as null); ``per_sample=False``: without the per-sample block."""
        return strict_json(self.to_dict(per_sample))

    def to_model_card(self, name: str | None = None, accuracy: float | None = None) -> str:
        """A Hugging Face model card (the text of a ``README.md``) carrying this audit: YAML front matter whose
        ``model-index`` holds the accuracy and each method's faithfulness and Deletion@1, then the audit table.

        Args:
            name: the model's name in the card (default: "laya model").
            accuracy: the test accuracy to report (default: the accuracy on the audited samples).
        """
        from .card import model_card

        meta = {
            "name": name,
            "dataset": self.settings.get("dataset"),
            "accuracy": self.accuracy if accuracy is None else accuracy,
            "accuracy_name": "Accuracy (audited samples)" if accuracy is None else "Test accuracy",
        }
        return model_card(meta, self.to_dict())


def ties_block(tol: float, degenerate: int, degenerate_by_ties: int, methods: dict[str, MethodScores]) -> dict:
    """The JSON's ``ties`` (docs/metrics.md, "Ties"): the tolerance, the samples whose Δ is degenerate (of them, those
    only within the tolerance), and per method its undefined samples split into those undefined because of ties
    (defined with exact ties) and those undefined for other reasons."""
    available = {m: s for m, s in methods.items() if s.available}
    return {
        "tolerance": tol,
        "degenerate": degenerate,
        "degenerate_by_ties": degenerate_by_ties,
        "undefined_by_ties": {m: s.undefined_by_ties for m, s in available.items()},
        "undefined_other": {m: s.undefined - s.undefined_by_ties for m, s in available.items()},
    }


def per_sample_block(columns: dict, samples: dict | None) -> dict:
    """The JSON's ``per_sample``: the audited samples' data-set indices and each method's per-sample columns,
    compactly (``stats.compact``), so a --baseline gate pairs the same samples (docs/ci.md)."""
    index = samples["index"].numpy() if samples is not None and "index" in samples else None
    return pack(columns, COMMON, index)
