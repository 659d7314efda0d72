"""What the gates decided about one audit: every check of ``--fail-under`` and ``--baseline``/``--max-drop``,
the verdict, and the parts each output shows (the tables, the Markdown, the JSON, JUnit, the stderr lines).

``GateRequest`` is what was asked (parsed and read before the run); its ``judge`` builds the ``GateOutcome``
once, after the audit, and ``outputs.py`` writes it. No torch: the audit is only read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..runtime.errors import LayaError, match_choice
from .checks import Check, Verdict, verdict
from .regression import Comparison, MaxDrop, check_settings, gate, parse_max_drop, planned_audit, read_audit_json
from .settings import GATE_ON, GateSettings
from .significance import BoundSettings, on_bound
from .thresholds import Threshold, parse_thresholds, threshold_checks

if TYPE_CHECKING:
    from ..auditing.results import AuditResult


@dataclass(frozen=True)
class GateRequest:
    """The gates asked of one audit: ``--fail-under`` thresholds, and a ``--baseline`` audit with its
    ``--max-drop`` rules (read before the run, so a bad one fails before any work)."""

    thresholds: list[Threshold] = field(default_factory=list)
    drops: list[MaxDrop] = field(default_factory=list)
    baseline: dict | None = None  # the baseline audit's JSON document
    baseline_path: str | Path | None = None
    allow_settings_change: bool = False
    bound: BoundSettings | None = None  # --gate-on bound (significance.py); None: the point values decide

    @classmethod
    def asked(cls, gates: GateSettings, methods: Sequence[str], scope: str) -> GateRequest:
        """What ``gates`` ask of an audit of ``methods`` at ``scope``: the thresholds and drops parsed against them,
        the baseline read (``on_bound`` then decides how, once the audit's settings are known)."""
        thresholds = parse_thresholds(gates.fail_under, methods, scope)
        drops = parse_max_drop(gates.max_drop, methods, scope)
        return cls.read(thresholds, drops, gates.baseline, gates.allow_settings_change)

    @property
    def metric_groups(self) -> list[str]:
        """The deeper metric groups the checks name (the audit computes them)."""
        from ..auditing.names import groups_of

        return groups_of([g.metric for g in [*self.thresholds, *self.drops]])

    @classmethod
    def read(
        cls,
        thresholds: Sequence[Threshold],
        drops: Sequence[MaxDrop] = (),
        baseline_path: str | Path | None = None,
        allow_settings_change: bool = False,
    ) -> GateRequest:
        """The request with its baseline read from ``baseline_path`` (a LayaError when that is not a laya audit
        JSON, or when there are ``drops`` and no baseline)."""
        if drops and baseline_path is None:
            raise LayaError("--max-drop needs --baseline FILE (the JSON of a previous laya audit --json)")
        baseline = read_audit_json(baseline_path) if baseline_path is not None else None
        return cls(list(thresholds), list(drops), baseline, baseline_path, allow_settings_change)

    def check_planned(self, settings, methods: Sequence[str], samples: int | None, model) -> None:
        """What is known before the run: a baseline audited with other settings fails now (unless they may
        differ), not after the work."""
        if self.baseline is not None:
            planned = planned_audit(settings, methods, samples, model)
            check_settings(self.baseline, planned, self.allow_settings_change, self.baseline_path)

    def judge(self, result: AuditResult, doc: dict) -> GateOutcome:
        """Run every gate on an audit (``doc``: its ``to_dict()``): the thresholds, and with a baseline the
        settings check (a LayaError unless they match or may differ) and the ``--max-drop`` rules."""
        comparison = (
            gate(self.baseline, doc, self.drops, self.allow_settings_change, self.baseline_path or "")
            if self.baseline
            else None
        )
        checks = threshold_checks(result, self.thresholds) + (comparison.checks if comparison else [])
        if self.bound is not None:
            checks = on_bound(checks, doc, self.baseline, self.bound)
            if comparison is not None:
                comparison.checks = [c for c in checks if c.gate == "max-drop"]
                for c in comparison.checks:  # the table marks a change that failed on its bound
                    if (pair := comparison.methods.get(c.method or "", {}).get(c.metric)) is not None:
                        pair["failed"] = c.failed
        return GateOutcome(self, comparison, checks, verdict(checks))

    def on_bound(self, gate_on: str, settings) -> GateRequest:
        """This request deciding its checks by their intervals when ``gate_on`` is ``bound`` (``--gate-on``), at
        the audit's ``settings`` (``AuditSettings``: ``ci``, ``bootstrap``, ``seed``)."""
        if match_choice("--gate-on", gate_on, GATE_ON) == "estimate":
            return self
        if not settings.ci:
            raise LayaError("--gate-on bound needs intervals: set --ci to a level above 0 (e.g. 0.95)")
        return dataclasses.replace(self, bound=BoundSettings(settings.ci, settings.bootstrap, settings.seed))


@dataclass(frozen=True)
class GateOutcome:
    request: GateRequest
    comparison: Comparison | None  # the audit next to its baseline (None: no baseline)
    checks: list[Check]  # the thresholds' checks, then the max-drop checks
    verdict: Verdict

    @property
    def thresholds(self) -> list[Threshold]:
        return self.request.thresholds

    @property
    def drops(self) -> list[MaxDrop]:
        return self.request.drops

    @property
    def compared(self) -> dict | None:
        """The comparison with the baseline as the tables and the JSON show it (None: no baseline)."""
        return self.comparison.to_dict() if self.comparison else None

    @property
    def misses(self) -> list[str]:
        """The message of each missed ``--fail-under`` check."""
        return [c.message for c in self.checks if c.failed and c.gate == "fail-under"]

    @property
    def drop_misses(self) -> list[str]:
        """The message of each missed ``--max-drop`` check."""
        return [c.message for c in self.checks if c.failed and c.gate == "max-drop"]

    @property
    def passed_on_bound(self) -> list[str]:
        """The message of each --gate-on bound check whose interval cleared its bar (with its detectable change)."""
        return [c.message for c in self.checks if c.interval is not None and c.passed]

    @property
    def undecided(self) -> list[str]:
        """The message of each --gate-on bound check whose interval straddled its bar."""
        return [c.message for c in self.checks if c.inconclusive]

    @property
    def drop_checks(self) -> int:
        """How many ``--max-drop`` checks had something to compare."""
        return sum(c.gate == "max-drop" and not c.skipped for c in self.checks)

    def json_blocks(self) -> dict:
        """What ``laya audit --json`` adds to the audit's own document: ``fail_under``, ``baseline`` (with a
        baseline) and ``verdict``."""
        misses = self.misses
        blocks: dict = {
            "fail_under": {"thresholds": [str(t) for t in self.thresholds], "misses": misses, "passed": not misses}
        }
        if self.comparison:
            blocks["baseline"] = self.compared
        blocks["verdict"] = self.verdict.to_dict()
        return blocks
