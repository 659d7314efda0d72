"""What ``laya bench`` reports besides its runs, for classifiers and language models alike (docs/benchmarks.md):
each run-level number's mean and 95 % Student-t interval over seeds (``seed_stats``, ``seed_interval``), paired
differences against ``laya`` — within a head, each method minus the ``laya`` method on the same run; across heads,
each head minus the ``laya`` head on the same seed — with their own t-intervals (pairing by run removes what a
seed's split and initialisation give every method and head alike), the machine it ran on, and file-safe names of
its folders (``slug``)."""

from __future__ import annotations

import math
import os
import platform
import re
import statistics

from ..auditing.names import OWN

LEVEL = 0.95
PAIRED_METRICS = ("faithfulness", "deletion@1", "deletion@1_normalised")


def _num(v) -> float:
    return math.nan if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def seed_interval(values) -> dict:
    """The t-interval of the defined values (``ci_low``/``ci_high``: None below two values)."""
    from ..stats.tinterval import t_interval  # numpy: not at import (laya --help imports the bench's defaults)

    t = t_interval([_num(v) for v in values], LEVEL)
    ok = t.n > 1 and not math.isnan(t.low)
    return {"ci_low": t.low if ok else None, "ci_high": t.high if ok else None, "ci_level": LEVEL}


def paired(a: list, b: list) -> dict:
    """Mean, std and t-interval of a − b over the runs where both are defined."""
    from ..stats.tinterval import t_interval

    diffs = [x - y for x, y in zip(map(_num, a), map(_num, b)) if not (math.isnan(x) or math.isnan(y))]
    t = t_interval(diffs, LEVEL)
    nan = lambda v: None if math.isnan(v) else v  # noqa: E731
    return {"mean": nan(t.mean), "std": nan(t.std), "ci_low": nan(t.low), "ci_high": nan(t.high), "n": t.n}


def asked_scope(audit: dict) -> str:
    """The scope a run's audit asked (its checkpoint's question; a record from before: the head's)."""
    return (audit.get("settings") or {}).get("scope") or "head"


def scored_methods(audit: dict) -> dict:
    """The methods a run's audit scored on its question: the network scope's where it asked the network alone, else
    the head scope's (``both``: the head's, as ``laya audit`` lists it first)."""
    return (audit.get("network") or {}).get("methods") or {} if asked_scope(audit) == "network" else audit["methods"]


def pair_with_laya(heads: dict, records: dict[str, list[dict]]) -> None:
    """Add ``vs_laya`` to each head's methods (method − laya, same run) and to each head (head − the laya head,
    same seed: test accuracy and each method's metrics). ``records``: head -> its run records in seed order."""
    for head, entry in heads.items():
        recs = records[head]
        runs = [scored_methods(r["audit"]) for r in recs]
        for m, block in entry["methods"].items():  # each method against OWN (laya: the head's α)
            if m == OWN or OWN not in entry["methods"] or not block["available"]:
                continue
            if not entry["methods"][OWN]["available"]:
                continue
            block["vs_laya"] = {k: paired([r[m][k] for r in runs], [r[OWN][k] for r in runs]) for k in PAIRED_METRICS}
        if head == "laya" or "laya" not in heads:
            continue
        base = {r["seed"]: r for r in records["laya"]}
        both = [(r, base[r["seed"]]) for r in recs if r["seed"] in base]
        vs = {"test_accuracy": paired([r["metrics"]["test_accuracy"] for r, _ in both],
                                      [b["metrics"]["test_accuracy"] for _, b in both])}  # fmt: skip
        for m in entry["methods"]:
            # the methods paired where both runs' questions asked the same scope: other effects make no pair
            same = [(r, b) for r, b in both if asked_scope(r["audit"]) == asked_scope(b["audit"])]
            mine = [scored_methods(r["audit"])[m] for r, _ in same]
            theirs = [scored_methods(b["audit"])[m] for _, b in same]
            if same and all(p["available"] for p in mine + theirs):
                vs[m] = {k: paired([p[k] for p in mine], [p[k] for p in theirs]) for k in PAIRED_METRICS}
        entry["vs_laya_head"] = vs


def seed_stats(values: list[float]) -> dict:
    """Mean, sample standard deviation (n − 1; null with one value) and the 95 % t-interval over seeds, NaN-free
    values only."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    mean = statistics.fmean(vals) if vals else None
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return {"mean": mean, "std": std, "n": len(vals), "values": list(values), **seed_interval(vals)}


def machine() -> dict:
    import torch

    from .. import __version__

    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "laya": __version__,
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
    return info


def slug(text: str) -> str:
    """A file-name-safe version of a dataset/backbone name (folder:~/x -> folder_x)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"
