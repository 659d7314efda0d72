"""The measurements behind ``--tie-tol`` (docs/metrics.md, "Ties"): how far float32 rounding moves the
leave-one-layer-out effects Δ and the attribution scores, and at which tolerance their ranks stop depending on it.

    python -m benchmarks.ties [--model m.pt] [--samples 256] [--json FILE]

Cases: ``collapsed`` (a seeded 6-layer LAYA head whose α sits on the last layer, every other α_i ≈ 1e-8, so their
Δ_i are rounding around zero: the all-MiniLM-L6-v2 case of issue #39, ``synthetic.make_collapsed_head``),
``partial`` (the same head with α off layers 0–2 only: faithfulness stays defined over the other three),
``ordinary`` (the same head without the collapse) and, with ``--model``, a checkpoint's head on its test features
(feature cache as ``laya audit`` uses it). Per case, four runs of the same samples and target classes (ŷ of the
float32 run at batch 256): float32 at batch sizes 1, 7 and 256 — the audit's own code (``lolo_effects``, Captum
through ``METHODS``) — and float64 (the head and the features in double; Captum on double inputs).

Table 1, per case and run: the largest |Δ − Δ(float64)| and |a − a(float64)| of each method (α, IG, Grad×Act):
the floor the tolerance must cover.
Table 2, per case and tolerance: the samples whose tie-aware Δ ranks differ between any run and float64, the
samples degenerate (Δ varies beyond the tolerance in at most one layer; float64), and per method the samples whose
ρ moves by more than 1e-6 between runs and the largest move of the mean faithfulness (over runs, against float64).
"""

from __future__ import annotations

import argparse
import copy
import json
import math

TOLERANCES = (0.0, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
BATCHES = (1, 7, 256)
METHODS_MEASURED = ("laya", "ig", "gradxact")


def _double_scores(head64, xs, target, ref, method: str):
    """A method's scores in float64 (Captum on double inputs; the audit's own path casts inputs to float32)."""
    import torch
    from captum.attr import InputXGradient, IntegratedGradients

    from laya_cli.auditing.methods import laya_attention, probability_forward, reduce_layers

    if method == "laya":
        return laya_attention(head64, xs)
    inputs = tuple(x.detach().clone().requires_grad_(True) for x in xs)
    forward = probability_forward(head64)
    if method == "gradxact":
        attrs = InputXGradient(forward).attribute(inputs, target=target)
    else:
        base = tuple(r.reshape(1, -1).double() for r in ref)
        attrs = IntegratedGradients(forward).attribute(inputs, baselines=base, target=target, n_steps=32)
    return reduce_layers(attrs).detach().to(torch.float64)


def one_run(head, feats, ref, target, batch: int | None) -> dict:
    """Δ and each measured method's scores of every sample, in batches of ``batch`` (float32), or float64 (None)."""
    import torch

    from laya_cli.auditing.methods import AttributionContext
    from laya_cli.auditing.metrics import lolo_effects
    from laya_cli.auditing.registry import METHODS

    if batch is None:
        head, feats, ref = copy.deepcopy(head).double(), [f.double() for f in feats], [r.double() for r in ref]
        batch = len(target)
    parts = {k: [] for k in ("delta", *METHODS_MEASURED)}
    for s in range(0, len(target), batch):
        xs, t = [f[s : s + batch] for f in feats], target[s : s + batch]
        parts["delta"].append(lolo_effects(head, xs, t, ref, "mean").double())
        for m in METHODS_MEASURED:
            if xs[0].dtype == torch.float64:
                parts[m].append(_double_scores(head, xs, t, ref, m))
            else:
                ctx = AttributionContext(target=t, baseline=ref, n_steps=32)
                parts[m].append(METHODS[m](head, xs, ctx).double())
    return {k: torch.cat(v) for k, v in parts.items()}


def measure(head, feats, ref) -> dict:
    """Every run of one case: {"f32/b1": …, "f32/b7": …, "f32/b256": …, "f64": …}."""
    import torch

    head = head.eval()
    feats = [f.float() for f in feats]
    ref = [r.float() for r in ref]
    with torch.no_grad():
        target = head(feats).logits.argmax(-1)
    runs = {f"f32/b{b}": one_run(head, feats, ref, target, b) for b in BATCHES}
    runs["f64"] = one_run(head, feats, ref, target, None)
    return runs


def floors(runs: dict) -> list[dict]:
    """Table 1: per float32 run, the largest absolute deviation of Δ and of each method's scores from float64
    (all in p_ŷ's units: α is a weight, IG and Grad×Act add up to changes of p_ŷ)."""
    ref, out = runs["f64"], []
    for name, r in runs.items():
        if name != "f64":
            out.append({"run": name, **{k: (r[k] - ref[k]).abs().max().item() for k in ("delta", *METHODS_MEASURED)}})
    return out


def _faithfulness(scores, delta, tol):
    from laya_cli.auditing.metrics import degenerate_effects, spearman_rows

    return spearman_rows(scores, delta, tol).masked_fill(degenerate_effects(delta, tol), math.nan)


def _nan_mean(t) -> float:
    ok = ~t.isnan()
    return t[ok].mean().item() if ok.any() else math.nan


def by_tolerance(runs: dict, tolerances=TOLERANCES) -> list[dict]:
    """Table 2: per tolerance, what still depends on the run (batch size, precision)."""
    import torch

    from laya_cli.auditing.metrics import average_ranks, degenerate_effects, tie_levels

    ref, others = runs["f64"], [r for k, r in runs.items() if k != "f64"]
    out = []
    for tol in tolerances:
        ranks = average_ranks(tie_levels(ref["delta"], tol))
        moved = torch.zeros(len(ranks), dtype=torch.bool)
        for r in others:
            moved |= (average_ranks(tie_levels(r["delta"], tol)) != ranks).any(-1)
        row = {"tol": tol, "delta_ranks_moved": int(moved.sum())}
        row["degenerate"] = int(degenerate_effects(ref["delta"], tol).sum())
        for m in METHODS_MEASURED:
            rho64 = _faithfulness(ref[m], ref["delta"], tol)
            changed, worst = torch.zeros(len(rho64), dtype=torch.bool), 0.0
            for r in others:
                rho = _faithfulness(r[m], r["delta"], tol)
                same = (rho - rho64).abs().le(1e-6) | (rho.isnan() & rho64.isnan())
                changed |= ~same
                mean, mean64 = _nan_mean(rho), _nan_mean(rho64)
                gap = 0.0 if math.isnan(mean) and math.isnan(mean64) else abs(mean - mean64)
                worst = max(worst, math.inf if math.isnan(gap) else gap)  # defined in one run only: inf
            row[f"{m}_moved"], row[f"{m}_faith_gap"], row[f"{m}_faith"] = int(changed.sum()), worst, _nan_mean(rho64)
        out.append(row)
    return out


def _cases(args) -> dict:
    from .synthetic import make_collapsed_head

    cases = {
        "collapsed": make_collapsed_head(batch=args.samples),
        "partial": make_collapsed_head(batch=args.samples, ignored=(0, 1, 2)),
        "ordinary": make_collapsed_head(batch=args.samples, collapse=0.0),
    }
    if args.model:
        from laya_cli.api import load
        from laya_cli.model.evaldata import load_eval_data

        model = load(args.model)
        data = load_eval_data(model, samples=args.samples)
        feats = [f.float() for f in data.features.feats] if hasattr(data.features, "feats") else None
        if feats is None:
            raise SystemExit("benchmarks.ties: --model needs cached (frozen) features")
        cases["model"] = (model.head, feats, [r.float() for r in model.reference])
    return cases


def _print(case: str, floor: list[dict], table: list[dict]) -> None:
    print(f"\n{case}: largest |float32 − float64| of the effects Δ and of each method's scores")
    print(f"  {'run':<10}{'Δ':>12}" + "".join(f"{m:>12}" for m in METHODS_MEASURED))
    for r in floor:
        print(f"  {r['run']:<10}{r['delta']:>12.2e}" + "".join(f"{r[m]:>12.2e}" for m in METHODS_MEASURED))
    print(f"{case}: per tolerance, samples whose ranks move between runs (b1, b7, b256, float64)")
    head = f"  {'tol':>8}{'Δ ranks':>9}{'degen.':>8}"
    head += "".join(f"{m + ' ρ moved':>17}{m + ' |ΔF|':>15}{m + ' F':>11}" for m in METHODS_MEASURED)
    print(head)
    for r in table:
        line = f"  {r['tol']:>8.0e}{r['delta_ranks_moved']:>9}{r['degenerate']:>8}"
        for m in METHODS_MEASURED:
            line += f"{r[m + '_moved']:>17}{r[m + '_faith_gap']:>15.2e}{r[m + '_faith']:>11.4f}"
        print(line)


def main(argv=None) -> dict:
    import torch

    p = argparse.ArgumentParser(prog="python -m benchmarks.ties", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="also measure this checkpoint's head on its (cached) test features")
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--json", help="write the tables here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = {}
    for case, (head, feats, ref) in _cases(args).items():
        runs = measure(head, feats, ref)
        out[case] = {"floors": floors(runs), "tolerances": by_tolerance(runs)}
        _print(case, out[case]["floors"], out[case]["tolerances"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
