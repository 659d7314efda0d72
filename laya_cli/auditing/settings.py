"""The audit's settings: what is audited (``AuditScopeSettings``: the methods compared, ``--compare``, and the scope,
``--scope``), how a layer is removed (``Removal``, ``--ablation``) and everything else an audit computes
(``AuditSettings``). Declared once (``runtime.declare.setting``); no torch,
so the gates read them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..runtime.declare import (
    COUNT_MAX,
    SEED_MAX,
    STEPS_MAX,
    Settings,
    check_at_least,
    check_fields,
    check_value,
    declared_setting,
    normalise,
    setting,
)
from ..runtime.environment import device_setting
from ..runtime.errors import LayaError, match_choice
from .names import parse_metric_groups
from .registry import compared_by_default

# How a layer is removed (docs/metrics.md, "Removing a layer"): at head scope r_i := its training mean, zero, or
# α_i := 0 (mask); at network scope tap i's output := its training mean, zero, its input (bypass: the block's update
# skipped, as layer-pruning does), or its input + the training mean of its update (mean-update).
HEAD_REMOVALS = ("mean", "zero", "mask")
NETWORK_REMOVALS = ("mean", "zero", "bypass", "mean-update")
REMOVALS = ("mean", "zero", "mask", "bypass", "mean-update")
BY_INPUT = ("bypass", "mean-update")  # network removals that put a block's own input in place of its output
TARGETS = ("predicted", "label")
REDUCES = ("sum", "abs", "l2")


@dataclass(frozen=True)
class Removal:
    """``--ablation`` parsed once: ``name`` as given (the JSON's ``ablation``), ``head`` the removal the head scope
    runs (bypass and mean-update replace a block's output by its input, which the head does not read: there the head
    removes by mean), ``network`` the one the network scope runs (None: mask changes only the head)."""

    name: str
    head: str
    network: str | None

    @classmethod
    def parse(cls, name: str) -> Removal:
        """The removal ``name`` stands for (an ``REMOVALS`` name, any case), or the one-line error."""
        name = match_choice("--ablation", name, REMOVALS)
        return cls(name, name if name in HEAD_REMOVALS else "mean", name if name in NETWORK_REMOVALS else None)

    def at(self, scope: str, network_scopes: str = "--scope network or both") -> Removal:
        """This removal, checked once against ``scope`` (head, network or both): a network-only removal at head
        scope, or mask (head only) at network scope, is the one-line error."""
        if scope == "head" and self.head != self.name:
            raise LayaError(f"--ablation {self.name} removes a block inside the network: use it with {network_scopes}")
        if scope != "head" and self.network is None:
            raise LayaError(
                f"--scope network patches activations inside the backbone: use --ablation "
                f"{', '.join(NETWORK_REMOVALS)} (--ablation {self.name} only changes the head)"
            )
        return self


SCOPES = ("head", "network", "both")  # laya audit --scope (docs/metrics.md, "Two scopes")
NETWORK_SCOPES = ("network", "both")  # the scopes that remove blocks inside the network (both: the head's too)


# --compare when none is named, per scope (each method's record says where it is compared by default). At network
# scope IG with the removal as its baseline sums to the effect Δ itself (completeness): the target computed another
# way, at ≥ 16 forward and backward passes of each layer's suffix where Δ costs one (docs/metrics.md); Grad×Act and
# attribution patching are the competitors there, one backward pass for all layers. So the network scope's default
# keeps the audit near its floor (benchmarks/audit_floor.py).
SCOPE_COMPARE = {scope: compared_by_default(scope) for scope in SCOPES}  # head ig,gradxact; network gradxact,atp
DEFAULT_COMPARE = SCOPE_COMPARE["head"]


def compare_for(compare: str | None, scope: str) -> str:
    """The methods ``--compare`` names, or the scope's default (``SCOPE_COMPARE``) when it names none."""
    return SCOPE_COMPARE.get(scope, DEFAULT_COMPARE) if compare is None else compare


def network_methods(methods: list[str], named: bool) -> list[str]:
    """The methods the network scope computes: ``methods`` where ``--compare`` named them (``named``), else those
    that are no reference there: IG computes the total effects themselves another way (a check of the audit, not a
    rival) at most of the network scope's cost, so ``--scope both`` runs it at the head scope only unless named
    (docs/audit.md, "Cost")."""
    from .verdict import is_reference

    return list(methods) if named else [m for m in methods if not is_reference(m.lower(), "network", None)]


@dataclass(frozen=True)
class AuditScopeSettings(Settings):
    """What is audited: the methods compared with laya and random, and where layers are removed — at the head's
    inputs (``head``, direct effects), inside the backbone (``network``, total effects), or ``both`` with their
    comparison. Kept apart from ``AuditSettings`` (each result records them in its own place) so head-scope results
    and settings stay exactly as they were."""

    PANEL: ClassVar[str] = "Main"

    compare: str | None = setting(
        None,
        "Methods to compare with laya and random: ig, gradxact, atp, saliency, contrib, global (comma list), 'all', "
        "or '' for none. Default: ig,gradxact at --scope head, gradxact,atp at network (where IG is the effect "
        "computed another way), ig,gradxact,atp for both (IG at the head scope only: named, it runs at both).",
        cli_type=str | None,
    )
    scope: str = setting(
        "head",
        "Where a layer is removed: head (at the head's inputs: direct effects), network (patched inside "
        "the backbone, later layers see it: total effects) or both (and their comparison). laya audit's default: "
        "the question the checkpoint's α was trained on (laya info says it; head for an α trained only to predict).",
        choices=SCOPES,
    )


# The default noise floor of faithfulness (docs/metrics.md, "Ties"; measured by benchmarks/ties.py): float32's
# rounding of effects Δ on p_ŷ between batch sizes and against float64 stays below it with a margin.
TIE_TOL = 1e-5
TIE_TOL_HELP = (
    "Noise floor of faithfulness and Deletion@1: a sample's effects Δ (and scores) within TOL of each "
    "other are ties (float rounding; default 1e-5 of p_ŷ); 0 = exact ties only."
)


def tie_tol_setting():
    """``--tie-tol``: a finite number in [0, 1) (a probability difference; 0 = exact ties only)."""
    return setting(
        TIE_TOL,
        TIE_TOL_HELP,
        flag="--tie-tol",
        minimum=0,
        below=1,
        rule="in [0, 1) (a difference of p_ŷ; 0 = exact ties only)",
    )


@dataclass(frozen=True)
class AuditSettings(Settings):
    PANEL: ClassVar[str] = "Audit"

    ablation: str = setting(
        "mean",
        "How a layer is removed: mean (r_i := training mean), zero, or mask (α_i := 0; laya/scalarmix heads); "
        "at network scope also bypass (a block's output := its input) or mean-update (input + its mean update). "
        "laya audit's default: the removal of the checkpoint's question.",
        choices=REMOVALS,
    )  # bypass and mean-update at network scope only
    target: str = setting("predicted", "Class explained: predicted (ŷ) or label (the true class).", choices=TARGETS)
    reduce: str = setting(
        "sum", "Per-layer reduction of gradient attributions: sum (signed), abs or l2.", choices=REDUCES
    )
    steps: int = setting(
        32,
        "Integrated Gradients: the most steps per sample (with --ig-tol 0: exactly these).",
        minimum=1,
        maximum=STEPS_MAX,
    )
    # IG's completeness tolerance: each sample's steps double from 4 (network scope: 16; auditing.ig_steps) until
    # Captum's convergence delta |δ| ≤ ig_tol·|p_ŷ(x) − p_ŷ(baseline)| or ``steps`` is reached; 0 = always ``steps``.
    ig_tol: float = setting(
        0.001,
        "Integrated Gradients: each sample's steps double from 4 (network scope: 16) until "
        "|convergence delta| <= TOL x |effect| (at most --steps); 0 = always --steps.",
        flag="--ig-tol",
        minimum=0,
        below=1,
        rule="in [0, 1) (0 = always --steps)",
    )
    internal_batch_size: int | None = setting(
        None,
        "Memory bound: at most this many rows per IG head pass (Captum's internal_batch_size).",
        minimum=1,
        panel="Run",
        maximum=COUNT_MAX,
    )
    batch_size: int = setting(
        256,
        "Samples per audited batch (default: 256, fewer when --max-memory needs it).",
        minimum=1,
        command_default=None,  # the command line's None: planned within --max-memory,
        panel="Run",
        maximum=COUNT_MAX,
    )
    seed: int = setting(0, "Seed of the --samples subset (and of the random method).", minimum=0, maximum=SEED_MAX)
    by_class: bool = setting(
        False, "Add faithfulness and Deletion@1 per class (with intervals, as --ci).", flag="--by-class"
    )
    device: str = device_setting(panel="Run")
    # The model-randomisation check runs on the first N audited samples, in whole batches (0: skipped):
    # a property of the method, not of a sample, that costs every method once more per cascade stage.
    randomisation_samples: int = setting(
        256,
        "The model-randomisation sanity check runs on the first N audited samples (whole batches; 0 skips it).",
        minimum=0,
        maximum=COUNT_MAX,
    )
    # The deeper metric groups computed (auditing.names.METRIC_GROUPS); faithfulness and Deletion@1 always are.
    metrics: tuple[str, ...] = setting(
        (),
        "Deeper metrics to compute and show: aopc, sufficiency, completeness, randomisation (comma list) or "
        "'all'. Faithfulness and Deletion@1 always are; a gate naming a deeper metric computes its group.",
        flag="--metrics",
        cli_type=str,
        command_default="",
    )
    # Bootstrap intervals of every metric (docs/metrics.md, "Intervals"): the level (0: none) and resamples.
    ci: float = setting(
        0.95,
        "Bootstrap confidence level of every metric's interval and of each method's difference from laya "
        "(0 = no intervals).",
        flag="--ci",
        minimum=0,
        below=1,
        rule="a level in [0, 1) (e.g. 0.95; 0 = no intervals)",
    )
    bootstrap: int = setting(
        1000, "Bootstrap resamples of the samples (seeded, paired across methods).", minimum=0, maximum=STEPS_MAX
    )  # ≥ 1 when intervals are on: validate()
    # The noise floor of faithfulness and Deletion@1 (docs/metrics.md, "Ties"): effects Δ (and scores) of one
    # sample within tie_tol of each other are ties; 0 = exact ties only.
    tie_tol: float = tie_tol_setting()

    @property
    def removal(self) -> Removal:
        """``ablation`` parsed (``Removal``): what the head scope and the network scope each remove."""
        return Removal.parse(self.ablation)

    def validate(self) -> AuditSettings:
        check_fields(self)
        normalise(self, metrics=tuple(parse_metric_groups(self.metrics)))  # a comma list or a sequence, canonical
        check_ci(self.ci, self.bootstrap)
        return self


def check_tie_tol(tol: float) -> float:
    """``--tie-tol``: a finite number in [0, 1) (a probability difference; 0 = exact ties only)."""
    return float(check_value(declared_setting(AuditSettings, "tie_tol"), tol))


def check_ci(level: float, resamples: int) -> None:
    """``--ci``: a level in [0, 1) (0: no intervals); ``--bootstrap``: resamples, ≥ 1 when intervals are on."""
    if not isinstance(level, (int, float)) or not 0 <= level < 1:
        raise LayaError(f"--ci must be a level in [0, 1) (e.g. 0.95; 0 = no intervals), got {level}")
    if level:
        check_at_least("--bootstrap", resamples, 1)
