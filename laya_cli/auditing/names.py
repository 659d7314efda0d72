"""The audit's vocabulary: its methods, metrics and column groups, and the parsing of their names.

No torch: the gates (``laya_cli.gates``) and the command line read these without loading a model.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..runtime.errors import match_choice, unknown_choice
from .registry import METHODS, having

# Read from the methods' records (registry.py): audited always, chosen by --compare.
ALWAYS = tuple(having("always"))
COMPARE = tuple(m for m in METHODS if m not in ALWAYS)
(OWN,) = having("own")  # the model's own attribution (laya: the head's α), what an unqualified gate item checks
FLOORS = tuple(having("model_free"))  # the floor every method must beat (random): "every method" leaves it out
METRICS = (
    "faithfulness",
    "deletion@1",
    "deletion@1_normalised",  # per method, higher is better
    "aopc",
    "sufficiency@1",
    "sufficiency@1_normalised",
    "completeness",
    "randomisation",
)
GLOBAL_METRICS = ("accuracy",)
# Metrics that only some methods have: a threshold on every method skips the others.
ONLY_FOR = {"completeness": tuple(having("convergence"))}  # the methods that report a convergence delta
# The deeper metrics, in groups that share their work: computed only when asked for (``--metrics``, or a gate
# naming one of their metrics), then in the table and the JSON. Faithfulness and Deletion@1 are always computed.
METRIC_GROUPS = ("aopc", "sufficiency", "completeness", "randomisation")
CORE_METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")
GROUP_OF = {
    "aopc": "aopc",
    "sufficiency@1": "sufficiency",
    "sufficiency@1_normalised": "sufficiency",
    "completeness": "completeness",
    "randomisation": "randomisation",
}
assert set(METRICS) == set(CORE_METRICS) | set(GROUP_OF)


def groups_of(metrics: Sequence[str]) -> list[str]:
    """The deeper metric groups that computing ``metrics`` (metric names, e.g. a gate's) needs, in canonical order."""
    wanted = {GROUP_OF[m] for m in metrics if m in GROUP_OF}
    return [g for g in METRIC_GROUPS if g in wanted]


def computed_metrics(groups: Sequence[str]) -> list[str]:
    """The metrics an audit computing the deeper ``groups`` reports, in ``METRICS`` order."""
    return [m for m in METRICS if m in CORE_METRICS or GROUP_OF[m] in groups]


def parse_metric_groups(spec: str | Sequence[str] | None) -> list[str]:
    """``--metrics``: the deeper metric groups computed and shown, in the canonical order (``all`` = every one)."""
    names = spec.split(",") if isinstance(spec, str) else list(spec or [])
    chosen = set()
    for name in (n.strip().lower() for n in names):
        if not name:
            continue
        if name == "all":
            chosen.update(METRIC_GROUPS)
        elif name in METRIC_GROUPS:
            chosen.add(name)
        else:
            raise unknown_choice("--metrics group", name, [*METRIC_GROUPS, "all"])
    return [g for g in METRIC_GROUPS if g in chosen]


def parse_methods(compare: str | Sequence[str] | None) -> list[str]:
    """``laya``, the compared methods in the order given (``all`` = every one), then ``random``."""
    names = compare.split(",") if isinstance(compare, str) else list(compare or [])
    chosen: list[str] = []
    for name in (n.strip() for n in names):
        if not name or name.lower() in ALWAYS:
            continue  # always audited
        name = match_choice("method", name, [*COMPARE, "all"])  # case-insensitive: IG = ig
        for m in COMPARE if name == "all" else (name,):
            if m not in chosen:
                chosen.append(m)
    return ["laya", *chosen, "random"]


# What a network-scope audit computes per method (docs/metrics.md, "Two scopes"); a ``network:`` gate item
# on another metric is a usage error, not a check that can only ever be undefined.
NETWORK_METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")
