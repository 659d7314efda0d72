"""``laya diff``'s settings: how two versions of a model are compared, per class (classifiers: a paired permutation
test per class, corrected over the classes) or per token (language models: paired intervals of each method's
change). Declared once (``runtime.declare.setting``); no torch, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...runtime.declare import SEED_MAX, STEPS_MAX, Settings, setting
from ...runtime.environment import device_setting
from ..registry import compared_by_default
from ..settings import REMOVALS, SCOPES, tie_tol_setting

CORRECTIONS = ("holm", "bh", "none")  # stats.multiple.CORRECTIONS (numpy: not imported by laya --help)
# What a diff's JSON records of its test (the scope and the removal are recorded beside them)
TESTED = ("permutations", "alpha", "correction", "min_js", "seed", "tie_tol")

# The practical size of a change of layer profile: a Jensen–Shannon divergence (base 2) of 0.01 bits is about what
# moving 12 % of the attention from one of two equally used layers to the other gives ([0.5, 0.5] against [0.62,
# 0.38]: 0.0105 bits). Below it a change is not called one, however significant (docs/audit.md, "laya diff"); laya
# export ranks an attention shift only from this size on (docs/export.md).
PRACTICAL_JS_BITS = 0.01


@dataclass(frozen=True)
class DiffSettings(Settings):
    PANEL: ClassVar[str] = "Diff"

    seed: int = setting(0, "Seed of the --samples subset and of the permutations.", minimum=0, maximum=SEED_MAX)
    permutations: int = setting(
        1000, "Permutations of each paired permutation test.", minimum=1, task="classify", maximum=STEPS_MAX
    )
    alpha: float = setting(
        0.05,
        "Significance level of a changed class, after correction.",
        above=0,
        below=1,
        task="classify",
    )
    correction: str = setting(
        "holm", "Multiple-testing correction over the classes: holm, bh or none.", choices=CORRECTIONS, task="classify"
    )
    min_js: float = setting(
        PRACTICAL_JS_BITS,
        "Practical size of a change: a class is called changed only when its layer profile's JS divergence (bits) is "
        "at least this, and significant (0: significance alone).",
        minimum=0,
        below=1,
        task="classify",
    )
    scope: str = setting(
        "head",
        "Where a layer is removed for the LOLO effects Δ: head (at the head's inputs: direct effects) or network "
        "(patched inside the backbone: total effects); language models also both.",
        choices=SCOPES,
    )
    ablation: str = setting(
        "mean",
        "How a layer is removed: mean (r_i := training mean), zero, or mask (α_i := 0; laya/scalarmix heads); at "
        "network scope also bypass or mean-update (language models: mean at head scope, bypass at network scope).",
        choices=REMOVALS,
    )
    tie_tol: float = tie_tol_setting()
    compare: str = setting(
        compared_by_default("lm-diff"),
        "The methods besides laya and random whose per-token faithfulness and Deletion@1 are compared (ig, "
        "gradxact, atp, …; comma list).",
        task="lm",
    )
    ci: float = setting(
        0.95, "The confidence level of each change's paired interval.", above=0, below=1, flag="--ci", task="lm"
    )
    bootstrap: int = setting(
        1000,
        "Bootstrap resamples of the positions (paired: A and B resampled alike).",
        minimum=1,
        task="lm",
        maximum=STEPS_MAX,
    )
    device: str = device_setting(panel="Run")

    def tested(self) -> dict:
        """What a classifier's diff JSON records of its test."""
        return {k: getattr(self, k) for k in TESTED}
