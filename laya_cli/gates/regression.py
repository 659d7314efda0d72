"""Regression gating: compare an audit with a stored one (``--baseline``) and allow bounded drops (``--max-drop``).

    laya audit new.pt --baseline main-audit.json --max-drop faithfulness=0.02,laya:deletion@1=0.01

A baseline is the JSON a previous ``laya audit --json`` wrote. It only means something when it
was taken on the same data, samples and settings: ``SETTINGS`` lists what must match, and a
difference is a usage error naming each setting (``--allow-settings-change`` overrides it,
knowingly). Only the metrics present in both audits are compared (a newer laya may record more).

``--max-drop`` items read ``[METHOD:]METRIC=AMOUNT``: ``AMOUNT`` is absolute (metric units,
``faithfulness=0.02``: fail when the value falls more than 0.02 below the baseline's) or
relative with a ``%`` (``faithfulness=5%``: more than 5 % of the baseline's magnitude). Without a
method an item applies to every method audited in both but ``random``. A ``network:`` prefix
(``network:ig:faithfulness=0.02``) compares the network-scope results (``laya audit --scope
network|both``; the baseline must hold them too): the comparison keys them ``network:METHOD``.
Definitions and examples: docs/ci.md.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..auditing.names import FLOORS, GLOBAL_METRICS, METRICS
from ..runtime.errors import LayaError
from ..runtime.shape import NONE, NUM, Each, Optional, shape_error
from .checks import Check
from .thresholds import gate_items, item_prefix, item_scopes

# Settings of the audit JSON that must match between a baseline and a new audit (the model may differ:
# that is the point). ``n_samples`` and the layer names live at the top level of the JSON.
SETTINGS = (
    "dataset",
    "samples",
    "seed",
    "ablation",
    "target",
    "reduce",
    "steps",
    "methods",
    "head",
    "layers",
    "tie_tol",  # faithfulness's noise floor (docs/metrics.md, "Ties"): other ties, other ranks
    "data_fingerprint",  # the audited test split (data/pinning.py): other data, other numbers
)
BOTH_RECORDED = ("data_fingerprint",)  # compared only where both audits record it (older audits do not)
TOP_LEVEL = ("n_samples", "layers")
EPS = 1e-12  # a drop exactly equal to the allowance passes; float noise does not fail a gate
_ITEM = re.compile(
    r"^(?:(?P<scope>(?i:network)):)?(?:(?P<method>[\w@.-]+):)?(?P<metric>[\w@.-]+)=(?P<value>[^=%]+)(?P<pct>%?)$"
)
SYNTAX = (
    "METRIC=AMOUNT (the model's own attribution, laya), METHOD:METRIC=AMOUNT or all:METRIC=AMOUNT (every method "
    "but random; AMOUNT absolute, or relative with %), comma-separated; prefix network: for the network scope"
)
NETWORK = "network:"  # the prefix of network-scope methods in a comparison (``network:ig``)


# --------------------------------------------------------------------------- reading a stored audit


_MAYBE_NUM, _TEXT = Optional((*NUM, NONE)), Optional((str, NONE))
_SCALAR = (str, *NUM, bool, NONE)
# What a consumer of an audit JSON reads from it (a --baseline's comparison, report.html, the model card), by type:
# checked before anything is drawn from the file. Fields no consumer reads are free.
AUDIT_SHAPE = {
    "settings": Each(Optional((*_SCALAR, list))),
    "n_samples": int,
    "accuracy": (*NUM, NONE),
    "layers": [str],
    "methods": Each(
        {
            **{m: _MAYBE_NUM for m in (*METRICS, "deletion@1_oracle", "deletion@1_random", "faithfulness_std")},
            "defined": Optional((int, NONE)),
            "available": Optional(bool),
            "note": _TEXT,
        }
    ),
    "notes": Optional([str]),
    "verdict": Optional(
        {"passed": Optional(bool), "checks": Optional(int), "failed": Optional(int), "skipped": Optional(int)}
    ),  # fmt: skip
    "options": Optional({"command": str, "values": Each((*_SCALAR, list), keys=r"[a-z][a-z0-9_]*")}),
    "baseline": Optional({"path": _TEXT, "settings_changed": Optional([str]), "checks": Optional([dict])}),
    "fail_under": Optional({"misses": Optional([str])}),
}


def read_audit_json(path: str | Path, option: str = "--baseline") -> dict:
    """A JSON document ``laya audit --json`` wrote, checked by type (``AUDIT_SHAPE``) for what every consumer
    reads."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LayaError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise LayaError(f"{option} {path} is a directory, not an audit JSON") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LayaError(f"cannot read {option} {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise LayaError(
            f"{option} {path} is not JSON ({e.msg} at line {e.lineno}); expected the file laya audit --json writes"
        ) from None
    if (error := shape_error(doc, AUDIT_SHAPE)) is not None:
        raise LayaError(
            f"{option} {path} is not a laya audit JSON ({error}); expected the file laya audit --json writes"
        )
    return doc


# --------------------------------------------------------------------------- --max-drop


@dataclass(frozen=True)
class MaxDrop:
    metric: str
    amount: float  # absolute (metric units), or a fraction of |baseline| when relative
    relative: bool = False
    method: str | None = None  # None: every method in both audits but random (all:; accuracy: the model's)
    scope: str = "head"  # "network": the network-scope results (``network:`` prefix)
    implied: bool = False  # the network half of an unqualified item at --scope both (``item_scopes``)

    def __str__(self) -> str:
        amount = f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"
        return f"{item_prefix(self.scope, self.method, self.metric)}{self.metric}={amount}"

    def allowed(self, baseline: float) -> float:
        """The largest drop allowed from ``baseline`` (in metric units)."""
        return self.amount * abs(baseline) if self.relative else self.amount


def parse_max_drop(
    spec: str | Sequence[str] | None, methods: Sequence[str] | None = None, scope: str = "head"
) -> list[MaxDrop]:
    """Parse ``--max-drop`` items; with ``methods``, also check the named methods are audited.
    ``scope``: the audit's ``--scope`` (``gate_items`` checks a ``network:`` item against it)."""
    out = []
    expected = f"{SYNTAX} (e.g. faithfulness=0.02,ig:deletion@1=5%)"
    for item, m, method, metric, amount in gate_items(spec, "--max-drop", _ITEM, expected, methods, scope):
        if not math.isfinite(amount) or amount < 0:
            raise LayaError(f"bad --max-drop '{item}': the allowed drop must be a finite number ≥ 0")
        pct = m.group("pct")
        allowed = amount / 100 if pct else amount
        scopes = item_scopes(m, scope, metric)
        out += [MaxDrop(metric, allowed, bool(pct), method, at, implied=i > 0) for i, at in enumerate(scopes)]
    return out


# --------------------------------------------------------------------------- settings


_MISSING = object()


def _setting(doc: dict, key: str):
    if key in TOP_LEVEL and key in doc:
        return doc[key]
    value = doc.get("settings", {}).get(key, _MISSING)
    if key == "tie_tol" and value is _MISSING and "settings" in doc:
        return 0.0  # an audit from before --tie-tol: exact ties
    if key == "methods" and isinstance(value, list):
        return sorted(value)  # which methods, not the order they were listed in
    return value


def settings_differences(baseline: dict, current: dict, keys: Sequence[str] = (*SETTINGS, "n_samples")) -> list[str]:
    """Each setting that differs, as 'samples 200 -> 100' (keys missing from ``current`` are not compared)."""
    out = []
    for key in keys:
        want = _setting(current, key)
        if want is _MISSING:
            continue
        have = _setting(baseline, key)
        if key in BOTH_RECORDED and (have is _MISSING or have is None or want is None):
            continue
        if have is _MISSING:
            out.append(f"{key} (not recorded in the baseline) -> {_show(want)}")
        elif have != want:
            out.append(f"{key} {_show(have)} -> {_show(want)}")
    return out


def _show(v) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v)) if len(v) <= 6 else f"[{len(v)} items]"
    return "all" if v is None else str(v)


def check_settings(baseline: dict, current: dict, allow_change: bool, baseline_path: str | Path = "") -> list[str]:
    """Raise (exit 2) when the audits were taken with other settings, unless ``allow_change``; returns the
    differences."""
    diffs = settings_differences(baseline, current)
    if diffs and not allow_change:
        where = f" {baseline_path}" if baseline_path else ""
        raise LayaError(
            f"the baseline{where} was audited with other settings: {'; '.join(diffs)}. "
            "Audit with the baseline's settings, or pass --allow-settings-change to compare anyway"
        )
    return diffs


# --------------------------------------------------------------------------- comparing


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return None if math.isnan(v) else float(v)


@dataclass
class Comparison:
    """A new audit next to its baseline: every shared metric, and the ``--max-drop`` checks."""

    baseline_path: str
    settings_changed: list[str]
    rules: list[MaxDrop]
    methods: dict[str, dict[str, dict]]  # method -> metric -> {"baseline", "current", "change", "failed"}
    accuracy: dict  # {"baseline", "current", "change", "failed"}
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(c.failed for c in self.checks)

    def to_dict(self) -> dict:
        return {
            "path": self.baseline_path,
            "settings_changed": self.settings_changed,
            "max_drop": [str(r) for r in self.rules],
            "passed": self.passed,
            "accuracy": self.accuracy,
            "methods": self.methods,
            "checks": [c.to_dict() for c in self.checks],
        }


def _pair(base, now) -> dict:
    b, c = _num(base), _num(now)
    return {"baseline": b, "current": c, "change": None if b is None or c is None else c - b, "failed": False}


def _network_methods(doc: dict) -> dict[str, dict]:
    """The network-scope methods of an audit JSON, keyed ``network:METHOD`` (none: a head-scope audit)."""
    methods = (doc.get("network") or {}).get("methods") if isinstance(doc.get("network"), dict) else None
    if not isinstance(methods, dict):
        return {}
    return {NETWORK + m: v for m, v in methods.items() if isinstance(v, dict)}


def compare(
    baseline: dict,
    current: dict,
    rules: Sequence[MaxDrop] = (),
    baseline_path: str | Path = "",
    settings_changed: Sequence[str] = (),
) -> Comparison:
    """Compare two audit JSON documents (``current``: ``AuditResult.to_dict()``) and run the ``--max-drop`` rules.
    Network-scope results present in both are compared too, keyed ``network:METHOD``."""
    base_methods = {**baseline["methods"], **_network_methods(baseline)}
    now_methods = {**current["methods"], **_network_methods(current)}
    shared = [m for m in now_methods if m in base_methods]
    methods = {}
    for m in shared:
        b, c = base_methods[m], now_methods[m]
        methods[m] = {k: _pair(b.get(k), c.get(k)) for k in METRICS if k in b and k in c}
    acc = _pair(baseline.get("accuracy"), current.get("accuracy"))
    checks = []
    for rule in rules:
        if rule.metric in GLOBAL_METRICS:
            checks.append(_drop_check(rule, None, acc))
            continue
        prefix = NETWORK if rule.scope == "network" else ""
        if rule.method is not None:
            targets = [prefix + rule.method]
        else:
            targets = [
                m
                for m in shared
                if m.startswith(NETWORK) == bool(prefix)
                and m.removeprefix(prefix) not in FLOORS
                and now_methods[m].get("available", True)
                and base_methods[m].get("available", True)
            ]
        for m in targets:
            pair = methods.get(m, {}).get(rule.metric)
            checks.append(_drop_check(rule, m, pair))
    return Comparison(str(baseline_path), list(settings_changed), list(rules), methods, acc, checks)


def _drop_check(rule: MaxDrop, method: str | None, pair: dict | None) -> Check:
    who = f"{method}: " if method else ""
    amount = f"{rule.amount * 100:g}%" if rule.relative else f"{rule.amount:g}"
    name = f"{method + ':' if method else ''}{rule.metric} drop<={amount}"

    def check(measured: float | None, required: str, passed: bool, message: str, **kw) -> Check:
        bar = rule.allowed(pair["baseline"]) if pair and pair.get("baseline") is not None else None
        return Check("max-drop", name, rule.metric, method, measured, required, passed, message, bar=bar, **kw)

    if pair is None and rule.implied:  # a head-scope baseline: the network half has nothing to regress from
        return check(
            None,
            "present in both audits",
            True,
            f"{who}{rule.metric} is not in the baseline at network scope: nothing to compare",
            skipped=True,
        )
    if pair is None:
        return check(
            None,
            "present in both audits",
            False,
            f"{who}{rule.metric} is not in both audits (required by --max-drop {rule})",
        )
    base, now = pair["baseline"], pair["current"]
    if base is None:
        return check(
            now,
            "a defined baseline value",
            True,
            f"{who}{rule.metric} has no baseline value (undefined in the baseline): nothing to compare",
            skipped=True,
        )
    allowed = rule.allowed(base)
    floor = base - allowed
    required = f">= {floor:.4f} (baseline {base:.4f} - {allowed:.4g})"
    if now is None:
        pair["failed"] = True
        return check(
            None,
            required,
            False,
            f"{who}{rule.metric} is undefined now, was {base:.4f} (required by --max-drop {rule})",
        )
    drop = base - now
    ok = drop <= allowed + EPS
    pair["failed"] = pair["failed"] or not ok
    verb = f"dropped {drop:.4f}" if drop > 0 else f"rose {-drop:.4f}" if drop < 0 else "unchanged"
    limit = f"{rule.amount * 100:g}% of the baseline = {allowed:.4f}" if rule.relative else f"{allowed:g}"
    message = f"{who}{rule.metric} {verb} ({base:.4f} -> {now:.4f}), " + (
        f"within the allowed {limit}" if ok else f"more than the allowed {limit}"
    )
    return check(now, required, ok, message)


def planned_audit(settings, methods: Sequence[str], samples: int | None, model) -> dict:
    """The settings of an audit about to run, in the JSON's shape, so a baseline mismatch fails before the work."""
    return {
        "settings": {
            "samples": samples,
            "seed": settings.seed,
            "ablation": settings.ablation,
            "target": settings.target,
            "reduce": settings.reduce,
            "steps": settings.steps,
            "tie_tol": settings.tie_tol,
            "methods": list(methods),
            "head": model.head_kind,
        },
        "layers": list(model.layer_names),
    }


def gate(
    baseline: dict,
    current: dict,
    rules: Sequence[MaxDrop],
    allow_settings_change: bool = False,
    baseline_path: str | Path = "",
) -> Comparison:
    """Check the settings match (or are allowed to differ), then compare and run the ``--max-drop`` rules."""
    changed = check_settings(baseline, current, allow_settings_change, baseline_path)
    return compare(baseline, current, rules, baseline_path, changed)


def junit_properties(doc: dict, baseline_path: str | Path | None = None) -> dict:
    """What a JUnit report records beside the checks: the model, the data and the audit's settings."""
    s = doc.get("settings", {})
    props = {
        "model": s.get("model"),
        "dataset": s.get("dataset"),
        "n_samples": doc.get("n_samples"),
        "accuracy": doc.get("accuracy"),
        "head": s.get("head"),
        "layers": ",".join(doc.get("layers", [])),
        "methods": ",".join(s.get("methods", [])),
        "samples": s.get("samples"),
        "seed": s.get("seed"),
        "ablation": s.get("ablation"),
        "target": s.get("target"),
        "reduce": s.get("reduce"),
        "steps": s.get("steps"),
        "fail_under": ",".join(s.get("fail_under") or []),
    }
    if baseline_path is not None:
        props["baseline"] = str(baseline_path)
    return props
