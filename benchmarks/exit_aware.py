"""``laya train --exit-aware W`` on a classifier, side by side with W 0: does training the head truncated at random
depths make ``laya depth``'s early exit cheaper, and what does it cost the full-depth head?

    python -m benchmarks.exit_aware [--dataset digits] [--backbone mlp] [--weights 0,1] [--seeds 1,2,3,4,5] [--out DIR]

Per weight and seed, each a ``laya`` subprocess: ``train --dataset D --backbone B --seed S --exit-aware W``
(everything else laya's defaults: ``make demo`` on digits with the mlp) → ``depth --json`` → ``audit --scope both
--compare laya,gradxact,atp``.
A run whose three files exist is reused. Printed: one row per run, then per weight mean [95 % t interval over
seeds] of test accuracy, the accuracy of the head truncated after the first tap (α masked), the share of backbone
FLOPs each exit policy saves at its cheapest point within 1 pp of the full model (``p_max``, ``alpha_mass``) and
the oracle's, α's head-scope faithfulness and Deletion@1 / its oracle, α's network-scope faithfulness beside
Grad×Act's, and the training seconds; the differences from W 0 paired by seed.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .lm_align import laya
from .network_alignment import cell
from .say import say


def run(a, weight: str, seed: int) -> dict:
    out = a.out / f"w{weight}-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    ckpt, depth, audit, timed = (out / n for n in ("model.pt", "depth.json", "audit.json", "train_seconds.json"))
    if not ckpt.is_file():
        seconds = laya("train", "--dataset", a.dataset, "--backbone", a.backbone, "--seed", str(seed),
                       "--exit-aware", weight, "--out", str(ckpt), "--overwrite", "--quiet")  # fmt: skip
        timed.write_text(json.dumps(seconds))
    if not depth.is_file():
        laya("depth", str(ckpt), "--json", str(depth))
    if not audit.is_file():
        samples = ("--samples", a.samples) if a.samples else ()
        laya("audit", str(ckpt), "--scope", "both", "--compare", "laya,gradxact,atp", *samples,
             "--json", str(audit), "--quiet")  # fmt: skip
    exits, doc = json.loads(depth.read_text()), json.loads(audit.read_text())
    by_policy = exits["early_exit"]["operating_points"]["1pp"]["by_policy"]
    saved = lambda p: 1 - by_policy[p]["flops_fraction"] if p in by_policy else 0.0  # noqa: E731
    head, net = doc["methods"], doc["network"]["methods"]
    oracle_d1 = head["laya"]["deletion@1_oracle"]
    return {
        "weight": weight, "seed": seed, "train_s": json.loads(timed.read_text()) if timed.is_file() else None,
        "accuracy": exits["full"]["accuracy"], "k1": exits["truncation"][0]["accuracy"],
        "exit_pmax": saved("p_max"), "exit_alpha": saved("alpha_mass"),
        "exit_oracle": 1 - exits["oracle"]["flops_fraction"],
        "head_laya": head["laya"]["faithfulness"],
        "d1_ratio": head["laya"]["deletion@1"] / oracle_d1 if oracle_d1 else None,
        "net_laya": net["laya"]["faithfulness"], "net_gradxact": net["gradxact"]["faithfulness"],
    }  # fmt: skip


COLUMNS = (
    ("accuracy", "test acc", 4),
    ("k1", "acc. truncated at k = 1", 4),
    ("exit_pmax", "p_max exit saved (≤ 1 pp)", 3),
    ("exit_alpha", "α-mass exit saved (≤ 1 pp)", 3),
    ("exit_oracle", "oracle saved", 3),
    ("head_laya", "head faith α", 3),
    ("d1_ratio", "D@1/oracle α head", 3),
    ("net_laya", "network faith α", 3),
    ("net_gradxact", "network faith G×A", 3),
    ("train_s", "train s", 1),
)
PAIRED = (("accuracy", 4), ("exit_pmax", 3), ("exit_alpha", 3), ("head_laya", 3), ("net_laya", 3))


def paired(runs: list[dict], base: dict[int, dict], key: str) -> list[float]:
    """``key`` of each run minus the baseline run of its seed, where both are defined."""
    return [r[key] - base[r["seed"]][key] for r in runs if None not in (r[key], base[r["seed"]][key])]


def tables(rows: list[dict]) -> list[str]:
    weights = list(dict.fromkeys(r["weight"] for r in rows))
    lines = ["| W | seeds | " + " | ".join(t for _, t, _ in COLUMNS) + " |", "|---|---:|" + "---:|" * len(COLUMNS)]
    for w in weights:
        runs = [r for r in rows if r["weight"] == w]
        cells = [cell([r[k] for r in runs if r.get(k) is not None], d) for k, _, d in COLUMNS]
        lines.append(f"| {w} | {len(runs)} | " + " | ".join(cells) + " |")
    base = {r["seed"]: r for r in rows if r["weight"] == weights[0]}
    lines += ["", f"Paired by seed, minus W {weights[0]}:", "",
              "| W | " + " | ".join(k for k, _ in PAIRED) + " |", "|---|" + "---:|" * len(PAIRED)]  # fmt: skip
    for w in weights[1:]:
        runs = [r for r in rows if r["weight"] == w and r["seed"] in base]
        lines.append(f"| {w} | " + " | ".join(cell(paired(runs, base, k), d) for k, d in PAIRED) + " |")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--backbone", default="mlp", help="a built-in (mlp, cnn), trained end to end")
    p.add_argument("--weights", default="0,1", help="--exit-aware W values, the first the baseline")
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--samples", default=None, help="laya audit --samples (default: laya's)")
    p.add_argument("--out", type=Path, default=Path("exit-aware-run"))
    p.add_argument("--jobs", type=int, default=1)
    a = p.parse_args(argv)
    todo = [(w, int(s)) for s in a.seeds.split(",") for w in a.weights.split(",")]
    with ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda ws: run(a, *ws), todo))
    say("| W | seed | " + " | ".join(t for _, t, _ in COLUMNS) + " |")
    say("|---|---:|" + "---:|" * len(COLUMNS))
    for r in rows:
        say(f"| {r['weight']} | {r['seed']} | " + " | ".join(cell([r[k]] if r[k] is not None else [], d)
                                                            for k, _, d in COLUMNS) + " |")  # fmt: skip
    say("")
    for line in tables(rows):
        say(line)
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
