"""``--fail-under``: the gate items' one parser (``gate_items``, shared with ``--max-drop``), thresholds, and
their checks against an audit result.

No torch: an ``AuditResult`` is only read (docs/ci.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..auditing.names import ALWAYS, COMPARE, FLOORS, GLOBAL_METRICS, METRICS, NETWORK_METRICS, ONLY_FOR, OWN
from ..runtime.errors import LayaError, match_choice, unknown_choice
from .checks import Check

if TYPE_CHECKING:
    from ..auditing.results import AuditResult

_THRESHOLD = re.compile(
    r"^(?:(?P<scope>(?i:network)):)?(?:(?P<method>[\w@.-]+):)?(?P<metric>[\w@.-]+)=(?P<value>[^=]+)$"
)
THRESHOLD_SYNTAX = (
    "METRIC=VALUE (the model's own attribution, laya), METHOD:METRIC=VALUE or all:METRIC=VALUE (every audited "
    "method but random), comma-separated (e.g. faithfulness=0.7,ig:deletion@1=0.2); prefix network: for the "
    "network scope"
)
ALL_METHODS = "all"  # the explicit all-methods form of a gate item (all:faithfulness=0.7)


@dataclass(frozen=True)
class Threshold:
    metric: str
    value: float
    method: str | None = None  # None: every audited method except random (all:; accuracy: the model's)
    scope: str = "head"  # "network": the network-scope results (``network:`` prefix)

    def __str__(self) -> str:
        return f"{item_prefix(self.scope, self.method, self.metric)}{self.metric}={self.value:g}"


def item_prefix(scope: str, method: str | None, metric: str) -> str:
    """How a gate item names what it checks: ``network:`` for the network scope, then its method (``all`` for
    every method); the model's metrics (accuracy) name none."""
    who = "" if metric in GLOBAL_METRICS else f"{method or ALL_METHODS}:"
    return ("network:" if scope == "network" else "") + who


def item_scope(match: re.Match, scope: str) -> str:
    """The scope a gate item checks: ``network`` with the ``network:`` prefix, or without one when the audit ran at
    network scope alone (an unqualified gate checks the question audited, docs/ci.md); else ``head``."""
    prefixed = "scope" in match.re.groupindex and match.group("scope") is not None
    return "network" if prefixed or scope == "network" else "head"


def item_scopes(match: re.Match, scope: str, metric: str) -> tuple[str, ...]:
    """Every scope a gate item checks: ``item_scope``'s, and at ``--scope both`` an unqualified item on the model's
    own attribution (no method, no prefix: the README's ``faithfulness=0.7``) checks α at both scopes, each of which
    must hold: the question of a checkpoint trained on both is both (a pass at the head scope must not hide the
    network's). An item naming a method keeps the head scope there (``network:`` names the other)."""
    first = item_scope(match, scope)
    both = scope == "both" and first == "head" and match.group("method") is None and metric in NETWORK_METRICS
    return (first, "network") if both else (first,)


def gate_items(
    spec: str | Sequence[str] | None,
    option: str,
    pattern: re.Pattern,
    expected: str,
    methods: Sequence[str] | None = None,
    scope: str = "head",
):
    """The items of a gate option (``--fail-under``, ``--max-drop``): comma-separated, repeatable
    ``[network:][METHOD:|all:]METRIC=NUMBER…`` checked alike — a known metric, a model metric without a method, a
    known method (any case) that is audited when ``methods`` is given, and a scope the audit has: ``scope`` is the
    audit's ``--scope`` (a ``network:`` item needs network or both; with network alone, the question a network-aligned
    checkpoint is audited on by default, an item without the prefix checks the network scope: ``item_scope``).
    An item without a method checks the model's own
    attribution (laya: a reference method fails a build only when named), ``all:`` every audited method but random.
    Yields (item, match, method, metric, number) — method None for ``all:`` and the model's metrics;
    ``match.group("scope")`` is ``"network"`` for a network-scope item (patterns without that group: head only)."""
    parts = [spec] if isinstance(spec, str) else list(spec or [])
    for item in (p.strip() for s in parts for p in s.split(",") if p.strip()):
        m = pattern.match(item.replace(" ", ""))
        if not m:
            raise LayaError(f"bad {option} '{item}': expected {expected}")
        method, metric, raw = m.group("method"), m.group("metric").lower(), m.group("value")
        network = item_scope(m, scope) == "network"
        try:
            number = float(raw)
        except ValueError:
            raise LayaError(f"bad {option} '{item}': '{raw}' is not a number") from None
        if metric in GLOBAL_METRICS:
            if method or network:
                raise LayaError(
                    f"bad {option} '{item}': {metric} belongs to the model, not to a method; "
                    f"write {metric}={m.string.partition('=')[2]}"
                )
        elif metric not in METRICS:
            raise unknown_choice(f"{option} metric", metric, [*METRICS, *GLOBAL_METRICS])
        else:
            if network and scope == "head":
                raise LayaError(f"{option} {item} checks the network scope; add --scope network or --scope both")
            if network and metric not in NETWORK_METRICS:
                raise LayaError(
                    f"{option} {item}: {metric} is not computed at network scope "
                    f"(only {', '.join(NETWORK_METRICS)}; metrics.md in laya's docs)"
                )
        yield item, m, _method(method, metric, option, item, methods), metric, number


def _method(method: str | None, metric: str, option: str, item: str, methods: Sequence[str] | None) -> str | None:
    """The method a gate item checks: the one it names (audited), None for ``all:`` and the model's metrics, the
    model's own attribution (laya) when it names none."""
    if metric in GLOBAL_METRICS or (method is not None and method.lower() == ALL_METHODS):
        return None
    if method is None:
        return OWN
    method = match_choice(f"{option} method", method, [*ALWAYS, *COMPARE])
    if methods is not None and method not in methods:
        raise LayaError(f"{option} {item} names {method}, which is not audited; add --compare {method}")
    return method


def parse_thresholds(
    spec: str | Sequence[str] | None, methods: Sequence[str] | None = None, scope: str = "head"
) -> list[Threshold]:
    """Parse ``--fail-under`` specs; with ``methods``, also check they name audited methods.
    ``scope``: the audit's ``--scope`` (see ``gate_items``)."""
    out = []
    for item, m, method, metric, value in gate_items(
        spec, "--fail-under", _THRESHOLD, THRESHOLD_SYNTAX, methods, scope
    ):
        if not math.isfinite(value):
            raise LayaError(f"bad --fail-under '{item}': the threshold must be a finite number")
        out += [Threshold(metric, value, method, at) for at in item_scopes(m, scope, metric)]
    return out


def threshold_checks(result: AuditResult, thresholds: Sequence[Threshold]) -> list[Check]:
    """One check per threshold and method it applies to, passed or not (for JUnit and the verdict).
    A network-scope threshold reads ``result.network`` and names its methods ``network:METHOD``."""
    checks = []
    for t in thresholds:
        if t.metric in GLOBAL_METRICS:
            value = result.accuracy
            ok = value >= t.value
            checks.append(
                Check(
                    "fail-under",
                    f"{t.metric}>={t.value:g}",
                    t.metric,
                    None,
                    None if math.isnan(value) else value,
                    f">= {t.value:g}",
                    ok,
                    f"{t.metric} {value:.4f} " + (">=" if ok else "<") + f" {t.value:g}",
                    bar=t.value,
                )
            )
            continue
        network = t.scope == "network"
        scored = (result.network.methods if result.network is not None else {}) if network else result.methods
        only = ONLY_FOR.get(t.metric)
        if t.method is not None:
            targets = [t.method]
        else:  # every audited method but random, that is defined for the head and has this metric
            targets = [m for m, s in scored.items() if m not in FLOORS and s.available and (only is None or m in only)]
        for m in targets:
            scores = scored.get(m)
            value = None if scores is None or not scores.available else scores.metric(t.metric)
            value = None if value is None or math.isnan(value) else value
            who = f"network:{m}" if network else m
            if scores is None:
                message = f"{who}: not audited (required by --fail-under {t})"
            elif only is not None and m not in only:
                message = f"{who}: {t.metric} applies to {', '.join(only)} only (required by --fail-under {t})"
            elif not scores.available:
                message = f"{who}: {t.metric} is {scores.note} (required by --fail-under {t})"
            elif value is None:
                why = "undefined on this data"
                if t.metric == "faithfulness" and scores.degenerate and scores.degenerate == scores.undefined:
                    tied = getattr(scores, "undefined_by_ties", 0)
                    why = (
                        f"undefined: degenerate on all {scores.degenerate} samples (Δ varies in at most one "
                        f"layer, e.g. a last head{f'; {tied} only within --tie-tol: rounding' if tied else ''}), "
                        "nothing to rank"
                    )
                message = f"{who}: {t.metric} is {why} (required by --fail-under {t})"
            else:
                message = f"{who}: {t.metric} {value:.4f} " + (">=" if value >= t.value else "<") + f" {t.value:g}"
            checks.append(
                Check(
                    "fail-under",
                    f"{who}:{t.metric}>={t.value:g}",
                    t.metric,
                    who,
                    value,
                    f">= {t.value:g}",
                    value is not None and value >= t.value,
                    message,
                    bar=t.value,
                )
            )
    return checks


def check_thresholds(result: AuditResult, thresholds: Sequence[Threshold]) -> list[str]:
    """One message per miss (a value below its threshold, or undefined where a value was required)."""
    return [c.message for c in threshold_checks(result, thresholds) if c.failed]
