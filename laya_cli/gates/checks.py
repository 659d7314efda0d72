"""The gate checks of an audit, one record each, whatever gate made them.

``laya audit`` gates in two ways: absolute thresholds (``--fail-under``, auditing.py) and
regressions against a stored audit (``--max-drop``, regression.py). Both produce ``Check``
records, so the verdict line, the JUnit file (junit.py), the JSON and the composite action
read one list. Plain data, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Check:
    """One gate check: a metric of one method (or of the model) against what a gate requires."""

    gate: str  # "fail-under" | "max-drop"
    name: str  # e.g. "ig:faithfulness>=0.8", "laya:faithfulness drop<=0.02"
    metric: str
    method: str | None  # None: a metric of the model (accuracy)
    measured: float | None  # None: undefined
    required: str  # human-readable requirement, e.g. ">= 0.8" or ">= 0.8312 (baseline 0.8512 - 0.02)"
    passed: bool
    message: str  # one line; for a failure, the line printed on stderr
    skipped: bool = False  # nothing to check against (e.g. the baseline value is undefined)
    # --gate-on bound (significance.py): the number the value is held to (the threshold; the allowed drop), the
    # confidence interval that decided, and whether it straddled the bar (neither passed nor failed)
    bar: float | None = None
    interval: tuple[float, float] | None = None
    inconclusive: bool = False

    @property
    def failed(self) -> bool:
        return not self.passed and not self.skipped and not self.inconclusive

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    checks: tuple[Check, ...]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def skipped(self) -> list[Check]:
        return [c for c in self.checks if c.skipped]

    @property
    def inconclusive(self) -> list[Check]:
        """--gate-on bound: the checks whose interval straddled their bar."""
        return [c for c in self.checks if c.inconclusive]

    @property
    def passed(self) -> bool:
        return not self.failures and not self.inconclusive

    @property
    def word(self) -> str:
        """What CI outputs carry: ``pass``, ``fail``, or ``inconclusive`` (no failure, but some check's interval
        straddled its bar); a usage error never gets this far (exit 2)."""
        return "fail" if self.failures else "inconclusive" if self.inconclusive else "pass"

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "verdict": self.word,
            "checks": len(self.checks),
            "failed": len(self.failures),
            "inconclusive": len(self.inconclusive),
            "skipped": len(self.skipped),
        }


def verdict(checks: Sequence[Check]) -> Verdict:
    return Verdict(tuple(checks))
