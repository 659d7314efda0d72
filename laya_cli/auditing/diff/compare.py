"""Two models' per-sample numbers (``profiles.Profiles``) on the same samples, compared (docs/audit.md, "laya
diff"): per class and per layer the change of mean α, of the LOLO effects Δ and of contrib; per class the
Jensen–Shannon divergence between the two models' mean layer profiles with a paired permutation test, its
p-value corrected over the classes (Holm or Benjamini–Hochberg); the accuracy change with McNemar's exact test. A
class is called changed only when its change is significant (corrected p below the level) and of a practical size
(its JS divergence at least ``--min-js`` bits): with enough samples a permutation test finds 0.003 bits, which no
reader would call a change of layer usage.

The layer profile of a sample is α(x) where both heads have layer weights, else its share of |Δ| per layer
(|Δ_i(x)| / Σ_j |Δ_j(x)|): what each model relies on, as a distribution over layers. Effects within the tie
tolerance of zero (``tie_tol``, float rounding: docs/metrics.md, "Ties") count as 0 there, so a sample whose
effects are all rounding has no profile (all zeros) instead of normalised noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...runtime.fileio import json_safe
from ...stats.mcnemar import mcnemar
from ...stats.multiple import adjust
from ...stats.permutation import paired_profile_test
from .profiles import Profiles
from .settings import DiffSettings

QUANTITIES = ("alpha", "delta", "contrib")  # the per-layer means compared


@dataclass
class DiffResult:
    """``laya diff``'s result, of either task: ``kind`` says what its tables hold — ``"classes"`` (two classifiers:
    per class and layer, ``classes``, ``changed``) or ``"tokens"`` (two language models: per method, layer and
    position in the block; ``tokens`` is that JSON document, built by ``diff.lm``). ``to_dict()`` is the JSON
    ``laya diff --json`` writes for either."""

    settings: dict
    layers: list[str]
    n_samples: int
    profile: str  # "alpha" or "|delta| share"; a language model's: "tokens"
    accuracy: dict
    overall: dict  # the whole set: js, p_value, and the per-layer means
    classes: dict[str, dict] = field(default_factory=dict)
    tokens: dict | None = field(default=None, repr=False)

    @classmethod
    def of_tokens(cls, doc: dict) -> DiffResult:
        """Two language models' diff: its document (``diff.lm.diff_language_models``) as the one result type."""
        return cls(doc["settings"], list(doc["layers"]), doc["n_samples"], "tokens", doc["accuracy"], {}, tokens=doc)

    @property
    def kind(self) -> str:
        return "classes" if self.tokens is None else "tokens"

    def __repr__(self) -> str:
        """The terminal's tables as plain text, at a terminal's width (report/notebook.py)."""
        from ...report.notebook import diff_text

        return diff_text(self.to_dict(), self.kind)

    def _repr_html_(self) -> str:
        """Jupyter's display: the tables and the class × layer picture of the change (B − A); a language model's:
        its tables."""
        from ...report.notebook import diff_html

        return diff_html(self.to_dict(), self.kind)

    @property
    def changed(self) -> list[str]:
        """The classes whose layer usage changed: significantly (corrected p below the level) and by at least the
        practical size (``--min-js``); a language model's diff has no classes."""
        return [c for c, v in self.classes.items() if v["changed"]]

    def to_dict(self) -> dict:
        if self.tokens is not None:
            return self.tokens
        return json_safe(
            {
                "settings": self.settings,
                "layers": self.layers,
                "n_samples": self.n_samples,
                "profile": self.profile,
                "accuracy": self.accuracy,
                "overall": self.overall,
                "classes": self.classes,
                "changed_classes": self.changed,
            }
        )


def layer_profile(p: Profiles, use_alpha: bool, tie_tol: float = 0.0) -> np.ndarray:
    """α, or each layer's share of |Δ| with |Δ| ≤ ``tie_tol`` taken as 0 (rounding, not an effect)."""
    if use_alpha:
        return p.alpha
    mag = np.abs(p.delta)
    mag = np.where(mag <= tie_tol, 0.0, mag) if tie_tol > 0 else mag
    total = mag.sum(-1, keepdims=True)
    return np.divide(mag, total, out=np.zeros_like(mag), where=total > 0)


def layer_means(a: Profiles, b: Profiles, rows: np.ndarray, layers: list[str]) -> list[dict]:
    """Per layer: each quantity's mean under A and B over ``rows`` and the change B − A (None where absent)."""
    out = []
    for i, name in enumerate(layers):
        row: dict = {"layer": name}
        for q in QUANTITIES:
            va, vb = getattr(a, q), getattr(b, q)
            ma = float(va[rows, i].mean()) if va is not None and rows.any() else None
            mb = float(vb[rows, i].mean()) if vb is not None and rows.any() else None
            row[f"{q}_a"], row[f"{q}_b"] = ma, mb
            row[f"{q}_change"] = None if ma is None or mb is None else mb - ma
        out.append(row)
    return out


def compare_profiles(
    a: Profiles, b: Profiles, classes: list[str], layers: list[str], settings: DiffSettings
) -> DiffResult:
    use_alpha = a.alpha is not None and b.alpha is not None
    pa, pb = layer_profile(a, use_alpha, settings.tie_tol), layer_profile(b, use_alpha, settings.tie_tol)
    every = np.ones(len(a.label), dtype=bool)
    whole = paired_profile_test(pa, pb, settings.permutations, settings.seed)
    test = mcnemar(a.pred == a.label, b.pred == b.label)
    acc_a, acc_b = float((a.pred == a.label).mean()), float((b.pred == b.label).mean())
    per_class, p_values = {}, []
    for c in np.unique(a.label):
        rows = a.label == c
        t = paired_profile_test(pa[rows], pb[rows], settings.permutations, settings.seed + 1 + int(c))
        p_values.append(t.p_value)
        per_class[classes[c] if c < len(classes) else str(c)] = {
            "n": int(rows.sum()),
            "accuracy_a": float((a.pred[rows] == c).mean()),
            "accuracy_b": float((b.pred[rows] == c).mean()),
            "js": t.statistic,
            "p_value": t.p_value,
            "layers": layer_means(a, b, rows, layers),
        }
    for v, adj in zip(per_class.values(), adjust(p_values, settings.correction)):
        v["p_adjusted"] = float(adj)
        v["significant"] = bool(adj < settings.alpha)
        v["changed"] = v["significant"] and v["js"] >= settings.min_js
    return DiffResult(
        settings=settings.tested(),
        layers=list(layers),
        n_samples=len(a.label),
        profile="alpha" if use_alpha else "|delta| share",
        accuracy={
            "a": acc_a,
            "b": acc_b,
            "change": acc_b - acc_a,
            "a_only": test.a_only,
            "b_only": test.b_only,
            "p_value": test.p_value,
        },
        overall={"js": whole.statistic, "p_value": whole.p_value, "layers": layer_means(a, b, every, layers)},
        classes=per_class,
    )
