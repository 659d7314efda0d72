"""A one-batch network-scope audit's own work beyond its passes, as the estimate's 2-image probe measures it.

    python -m benchmarks.own_work [--case vit,cnn,bert] [--compare gradxact,atp] [--images 32]

The figures that size ``auditing.estimate.FAR_UNDER`` (issue 73: a one-batch audit far under the line runs no probe,
so a batch's own work must be small next to the margin). On ``benchmarks.dispatch``'s models (frozen, random weights:
vit_tiny at its 12 blocks, resnet18 at 8, a 4-layer BERT), the network-scope audit of ``--images`` inputs in one
batch (``--ablation bypass``, the methods ``--compare`` names) makes its estimate at threshold 0, so the probe runs,
cold and then warm; the audit itself is not run. Per case: the passes and the forward the estimate counted, each
probe run's seconds and operations (each one kernel launch on a GPU), the first run's bound (the warm-up in it) and
the warm own work (the probe's time less its counted passes: noise where the passes are most of it).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


class _Made(Exception):
    """The estimate is made: the audit is not run."""


def _case(name: str, n: int):
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.evaldata import EvalData

    from . import dispatch

    if name == "bert":
        _, model, x = dispatch.text_case(n, Path(tempfile.mkdtemp()))
    else:
        side = 224 if name == "vit" else 64
        _, model, x = dispatch.image_case({"vit": "vit_tiny_patch16_224", "cnn": "resnet18"}[name], side, n)
    feats = LayerFeatures(model.features(x), torch.zeros(n, dtype=torch.long))
    return model, EvalData(feats, x, torch.arange(n), "random")


def measure(name: str, compare: str, n: int) -> dict:
    """The estimate's figures for one case (module docstring)."""
    from laya_cli.auditing import estimate, job
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import AuditSettings, compare_for

    from . import dispatch

    model, data = _case(name, n)
    out: dict = {"runs": []}
    per_batch_seconds, audit_cost = estimate.per_batch_seconds, estimate.audit_cost

    def counted_probe(run_probe, passes_seconds, again=lambda bound: True, clock=time.perf_counter):
        def run():
            started = time.perf_counter()
            tally = dispatch.count(run_probe)
            out["runs"].append((time.perf_counter() - started, tally.n_ops))

        def bound(b):
            out["bound"] = b
            return again(b)

        out["probe passes"] = passes_seconds
        return per_batch_seconds(run, passes_seconds, bound, clock)

    def made(*args, **kwargs):
        out["cost"] = audit_cost(*args, **{**kwargs, "say_above": 0.0})
        raise _Made

    estimate.per_batch_seconds, estimate.audit_cost = counted_probe, made
    settings = AuditSettings(ablation="bypass", batch_size=n).validate()
    try:
        job.run_scoped_audit(model, data, parse_methods(compare_for(compare, "network")), settings, "network")
    except _Made:
        pass
    finally:
        estimate.per_batch_seconds, estimate.audit_cost = per_batch_seconds, audit_cost
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.own_work", description=__doc__.splitlines()[0])
    p.add_argument("--case", default="vit,cnn,bert")
    p.add_argument("--compare", default="gradxact,atp", help="the network scope's methods (laya's --compare)")
    p.add_argument("--images", type=int, default=32)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print("| case | methods | passes a sample | forward a sample | passes of the batch | probe runs: s (ops) | "
          "first run's bound | warm own work |")  # fmt: skip
    print("|---|---|---:|---:|---:|---|---:|---:|")
    results = {}
    for name in args.case.split(","):
        r = results[name] = measure(name, args.compare, args.images)
        c = r["cost"]
        runs = ", ".join(f"{s:.2f} ({ops:,})" for s, ops in r["runs"])
        print(f"| {name} | {args.compare} | {c.passes:.1f} | {c.forward * 1e3:.2f} ms | {c.passes_seconds:.2f} s | "
              f"{runs} | {r['bound']:.2f} s | {c.per_batch:.2f} s |", flush=True)  # fmt: skip
    return results


if __name__ == "__main__":
    main()
