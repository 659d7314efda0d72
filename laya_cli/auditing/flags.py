"""Results that say nothing, flagged wherever they are shown (docs/metrics.md, "Uninformative results"): each flag is
one line that says what it means for the reader. Pure functions of the numbers a checkpoint or an audit JSON holds.

- **α within noise of uniform** (``uniform_alpha_flag``): on average no layer takes more than ``UNIFORM_RATIO`` times
  its uniform share 1/L (``top_weight_ratio`` of the α summary: mean over samples of L · max_i α_i, exactly 1 for a
  uniform α); a summary from before that key: the mean entropy within ``UNIFORM_ENTROPY`` of its maximum log L.
  Either way the weights differ from 1/L by less than the head's own noise, so ranking layers by them is ranking noise.
- **a model within noise of chance** (``chance_flag``): the accuracy is at most two binomial standard errors above
  the chance rate (the larger of 1/classes and the majority class's share; ``metrics.near_chance``, the audit's own
  rule): the model may have learnt nothing, and every attribution explains a guess.
- **effects too small to rank** (``small_effects_flag``): more than half the audited samples have layer effects Δ
  that vary in at most one layer within the tie tolerance (``ties.degenerate``), or the scope's ranking is
  undetermined: faithfulness is then a ranking of ties.
"""

from __future__ import annotations

import math

from ..stats.proportion import wilson
from .metrics import near_chance

UNIFORM_RATIO = 1.1  # mean L · max α at most this: no layer gets 10 % more than its uniform share
UNIFORM_ENTROPY = 0.999  # older summaries: mean entropy ≥ this share of log L (6 layers: ≥ 5.99 effective layers)
SMALL_EFFECTS = 0.5  # more than this share of samples with degenerate effects


def uniform_alpha_flag(summary: dict | None) -> str | None:
    """The line for an α that is uniform within noise (``collapse.collapse_summary``); None otherwise or without α."""
    if not summary or summary.get("layers", 0) < 2:
        return None
    ratio = summary.get("top_weight_ratio")
    if isinstance(ratio, (int, float)) and math.isfinite(ratio):
        flagged, said = ratio <= UNIFORM_RATIO, f"its largest weight is on average {ratio:.2f} × the uniform 1/L"
    else:
        h, h_max = summary.get("entropy_mean"), summary.get("entropy_max")
        flagged = bool(h_max) and h is not None and math.isfinite(h) and h >= UNIFORM_ENTROPY * h_max
        said = f"entropy {h:.3f} of its maximum {h_max:.3f}" if flagged else ""
    if not flagged:
        return None
    return (
        f"flag: α is uniform within noise ({summary.get('effective_layers_mean', math.nan):.2f} effective layers of "
        f"{summary['layers']}; {said}): it does not say which layer matters, so its faithfulness and any depth "
        "decision read from it rank noise"
    )


def chance_rate(labels, n_classes: int) -> float | None:
    """The accuracy a model gets by guessing: the larger of 1/classes and the majority class's share of ``labels``
    (a sequence of class ids); None without labels or classes."""
    labels = [int(x) for x in labels]
    if not labels or n_classes < 1:
        return None
    majority = max(labels.count(c) for c in set(labels)) / len(labels)
    return max(1.0 / n_classes, majority)


def chance_flag(accuracy: float | None, n: int | None, chance: float | None, unit: str = "samples") -> str | None:
    """The line for a model whose accuracy is within noise of ``chance`` (``metrics.near_chance``), with its 95 %
    Wilson interval over ``n`` ``unit`` (a language model's: positions)."""
    if accuracy is None or not n or chance is None or not math.isfinite(accuracy):
        return None
    if not near_chance(accuracy, chance, int(n)):
        return None
    interval = wilson(round(accuracy * n), int(n))
    return (
        f"flag: the model is within noise of chance (accuracy {accuracy:.3f} [{interval.low:.3f}, "
        f"{interval.high:.3f}] on {n:,} {unit}, chance {chance:.3f}): it may have learnt nothing, so its attributions "
        "explain guesses and depth savings measured on it mean nothing"
    )


def small_effects_flag(ties: dict | None, n: int, ranking: dict | None = None, scope: str = "head") -> str | None:
    """The line for a scope whose layer effects are too small (or too close) to rank on most samples."""
    degenerate = (ties or {}).get("degenerate") or 0
    undetermined = bool(ranking) and not ranking.get("determined", True)
    if not n or (degenerate / n <= SMALL_EFFECTS and not undetermined):
        return None
    share = f"{degenerate:,} of {n:,} samples" if degenerate / n > SMALL_EFFECTS else "most samples"
    return (
        f"flag: at {scope} scope the layers' effects are too small or too close to rank on {share}: faithfulness "
        "there ranks ties, so no method's number (α's included) says which layer matters"
    )


def audit_flags(doc: dict, chance: float | None = None) -> list[str]:
    """Every flag an audit JSON (``doc``) earns: α uniform, the model at ``chance`` (None: not known; a language
    model's samples are positions), each scope's effects too small to rank."""
    n = doc.get("n_samples") or 0
    network = doc.get("network") or {}
    unit = "positions" if (doc.get("settings") or {}).get("task") == "lm" else "samples"
    flags = [
        uniform_alpha_flag(doc.get("alpha_collapse")),
        chance_flag(doc.get("accuracy"), n, chance, unit),
        small_effects_flag(doc.get("ties"), n, doc.get("ranking"), "head") if doc.get("methods") else None,
        small_effects_flag(network.get("ties"), n, network.get("ranking"), "network") if network else None,
    ]
    return [f for f in flags if f]


def checkpoint_flags(ckpt_metrics: dict | None, n_classes: int) -> list[str]:
    """The flags a checkpoint's own metrics earn (``laya info``, the end of ``laya train``, ``laya depth``): α
    uniform on the test split, the test accuracy within noise of chance (a language model's: its own next-token
    accuracy on the held-out positions against the most frequent next token's share, as its depth and audit hold it)."""
    m = ckpt_metrics or {}
    if "next_token" in m:  # a language model: its own next-token accuracy against the most frequent next token
        said = m["next_token"]
        share = said.get("most_frequent_share")
        chance = chance_flag(said.get("model_accuracy"), said.get("positions"), share, "positions")
    else:
        rate = m.get("test_chance") or (1.0 / n_classes if n_classes else None)
        chance = chance_flag(m.get("test_accuracy"), m.get("n_test"), rate)
    flags = [uniform_alpha_flag(m.get("alpha_collapse")), chance]
    return [f for f in flags if f]


def checkpoint_findings(ckpt: dict) -> dict:
    """What ``laya info`` adds to a checkpoint's summary: its ``question`` (auditing/question.py) and ``flags``."""
    from .question import checkpoint_question

    return {
        "question": checkpoint_question(ckpt).to_dict(),
        "flags": checkpoint_flags(ckpt.get("metrics"), len(ckpt.get("classes") or [])),
    }
