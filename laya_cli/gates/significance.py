"""``--gate-on bound``: gates that read the confidence interval, not the point value (docs/ci.md).

A ``--fail-under METRIC=T`` check passes when the metric's interval lies at or above T, fails when it lies
below, and is **inconclusive** when it straddles T. A ``--max-drop METRIC=A`` check takes the paired interval of
(candidate − baseline) — both audits' per-sample scores, on the very same samples, resampled together — and
passes when it lies at or above −A, fails when it lies below, and is inconclusive otherwise. Each check says the
smallest change its sample count resolves: the interval's half-width. An accuracy check reads the Wilson score
interval of the accuracy (``--fail-under``) or Newcombe's hybrid score interval of its change (``--max-drop``;
``stats.proportion``). Network-scope checks keep the point value (they have no per-sample columns here). No
torch: numpy only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..runtime.errors import LayaError
from ..stats.audit_columns import STATISTICS, paired_change
from ..stats.compact import decode_index, unpack
from ..stats.proportion import newcombe_difference, wilson
from .checks import Check

_SEED = 0xD209  # offset of the paired change's bootstrap seed from the audit's --seed


@dataclasses.dataclass(frozen=True)
class BoundSettings:
    """How the bound is computed: the audit's confidence level, resamples and seed."""

    level: float
    resamples: int
    seed: int


def sample_columns(doc: Mapping, method: str) -> dict[str, np.ndarray] | None:
    """One method's per-sample columns from an audit JSON's ``per_sample`` block (None: not recorded)."""
    try:
        return unpack(doc.get("per_sample") or {}, method)
    except (ValueError, TypeError) as e:
        raise LayaError(f"the per-sample scores of {method} in an audit JSON are corrupt ({e})") from None


def check_paired(baseline: Mapping, current: Mapping) -> None:
    """A LayaError unless both audits recorded per-sample scores of the same samples, in the same order."""
    base, now = baseline.get("per_sample"), current.get("per_sample")
    if not base:
        raise LayaError(
            "--gate-on bound with --max-drop needs the baseline's per-sample scores, which its JSON lacks "
            "(written with --no-per-sample, or by an older laya): audit the baseline model again with --json"
        )
    b, c = base.get("index"), (now or {}).get("index")
    if b is not None and c is not None and not np.array_equal(decode_index(b), decode_index(c)):
        raise LayaError(
            "--gate-on bound: the baseline was audited on other samples than this audit (a paired interval "
            "needs the same --samples and --seed on the same data)"
        )


def _verdict(low: float, high: float, bar: float) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undefined"
    return "pass" if low >= bar else "fail" if high < bar else "inconclusive"


def _needed(margin: float, half_width: float, n: int, verdict: str) -> str:
    """For an inconclusive check: about how many samples would resolve this margin (the half-width shrinks as
    1/√n), assuming the estimate stays where it is."""
    if verdict != "inconclusive" or not n:
        return ""
    if abs(margin) < 1e-12:
        return "; the estimate sits on the bar: no sample count resolves it"
    return f"; about {int(np.ceil(n * (half_width / abs(margin)) ** 2)):,} would resolve a margin of {abs(margin):.4f}"


def _decided(check: Check, verdict: str, low: float, high: float, message: str) -> Check:
    return dataclasses.replace(
        check,
        passed=verdict == "pass",
        inconclusive=verdict == "inconclusive",
        interval=(low, high),
        message=message,
    )


def _correct(doc: Mapping) -> tuple[int, int] | None:
    """An audit's (correct, n) from its accuracy and sample count (None: not recorded)."""
    acc, n = doc.get("accuracy"), doc.get("n_samples")
    if not isinstance(acc, (int, float)) or not isinstance(n, int) or not np.isfinite(acc) or n <= 0:
        return None
    return round(acc * n), n


def accuracy_on_bound(check: Check, current: Mapping, baseline: Mapping | None, level: float) -> Check:
    """An accuracy check decided by an interval: ``--fail-under`` by the Wilson score interval of the accuracy,
    ``--max-drop`` by Newcombe's interval of its change (current − baseline) against −(allowed drop)."""
    now = _correct(current)
    if check.bar is None or check.skipped or check.measured is None or now is None:
        return check
    if check.gate == "fail-under":
        found, bar, what = wilson(*now, level), check.bar, f"accuracy {check.measured:.4f}, Wilson"
    else:
        base = _correct(baseline or {})
        if base is None:
            return check
        found, bar = newcombe_difference(base, now, level), -check.bar
        what = f"accuracy change {now[0] / now[1] - base[0] / base[1]:+.4f}, Newcombe"
    verdict = _verdict(found.low, found.high, bar)
    if verdict == "undefined":
        return check
    versus = f"vs {check.bar:g}" if check.gate == "fail-under" else f"vs allowed drop {check.bar:g}"
    message = (
        f"{what} {level * 100:g}% CI [{found.low:.4f}, {found.high:.4f}] {versus}: {verdict.upper()} "
        f"(smallest resolvable margin ±{found.half_width:.4f} at {now[1]} samples"
        + _needed(found.estimate - bar, found.half_width, now[1], verdict)
        + ")"
    )
    return _decided(check, verdict, found.low, found.high, message)


def threshold_on_bound(check: Check, doc: Mapping, level: float) -> Check:
    """A ``--fail-under`` check of a head-scope method decided by the metric's interval (``ci`` in the JSON)."""
    if check.method is None and check.metric == "accuracy":
        return accuracy_on_bound(check, doc, None, level)
    if check.method is None or check.measured is None or check.bar is None or check.skipped:
        return check
    block = ((doc.get("methods") or {}).get(check.method) or {}).get("ci", {}).get(check.metric)
    if not block or block.get("ci_low") is None or block.get("ci_high") is None:
        return check  # no interval of this metric (e.g. completeness): the point value decides
    low, high, n = block["ci_low"], block["ci_high"], block.get("n_defined", 0)
    verdict = _verdict(low, high, check.bar)
    if verdict == "undefined":
        return check
    half = (high - low) / 2
    message = (
        f"{check.method}: {check.metric} {check.measured:.4f}, {level * 100:g}% CI [{low:.4f}, {high:.4f}] vs "
        f"{check.bar:g}: {verdict.upper()} (smallest resolvable margin ±{half:.4f} at {n} samples"
        + _needed(check.measured - check.bar, half, n, verdict)
        + ")"
    )
    return _decided(check, verdict, low, high, message)


def drop_on_bound(check: Check, baseline: Mapping, current: Mapping, bound: BoundSettings) -> Check:
    """A ``--max-drop`` check of a head-scope method decided by the paired interval of (candidate − baseline)."""
    if check.method is None and check.metric == "accuracy":
        return accuracy_on_bound(check, current, baseline, bound.level)
    if check.method is None or check.skipped or check.bar is None or check.metric not in STATISTICS:
        return check
    base, now = sample_columns(baseline, check.method), sample_columns(current, check.method)
    if base is None or now is None or len(next(iter(base.values()))) != len(next(iter(now.values()))):
        return check  # nothing to pair: the point value decides (the message says so)
    change = paired_change(base, now, check.metric, bound.level, bound.resamples, bound.seed + _SEED)
    if change is None:
        return check
    verdict = _verdict(change.low, change.high, -check.bar)
    if verdict == "undefined":
        return check
    message = (
        f"{check.method}: {check.metric} change {change.estimate:+.4f}, paired {bound.level * 100:g}% CI "
        f"[{change.low:+.4f}, {change.high:+.4f}] vs allowed drop {check.bar:g}: {verdict.upper()} "
        f"(smallest detectable drop ±{change.half_width:.4f} at {change.n_defined} paired samples"
        + _needed(change.estimate + check.bar, change.half_width, change.n_defined, verdict)
        + ")"
    )
    return _decided(check, verdict, change.low, change.high, message)


def on_bound(checks: Sequence[Check], current: Mapping, baseline: Mapping | None, bound: BoundSettings) -> list[Check]:
    """Every check decided by its interval where it has one (the others by their point value)."""
    if baseline is not None and any(c.gate == "max-drop" and c.method is not None for c in checks):
        check_paired(baseline, current)
    out = []
    for c in checks:
        if c.gate == "fail-under":
            out.append(threshold_on_bound(c, current, bound.level))
        elif c.gate == "max-drop" and baseline is not None:
            out.append(drop_on_bound(c, baseline, current, bound))
        else:
            out.append(c)
    return out
