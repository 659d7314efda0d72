"""Issue 37's goals on a causal language model: the per-layer KL/CE table, the per-token audit at both scopes
with intervals, the early-exit sweep — each through the commands a user runs.

    python -m benchmarks.lm_goals --model DIR --corpus DIR [--out DIR] [--epochs 2] [--objective kl]
                                  [--layer-dropout 0.3] [--samples 2000] [--exit-tokens 20000]

DIR is a ``save_pretrained`` causal LM (``python -m benchmarks.causal_lm`` trains one from scratch on the WordNet
glosses) and its corpus (``train.txt``/``test.txt``). Steps (each a ``laya`` subprocess, timed):
``train --task lm`` → ``info --json`` → ``audit --scope both --compare laya,ig,gradxact,atp --ci 0.95`` →
``depth``. Printed: the goals, read off the JSON files written beside the checkpoint:

- α's per-token faithfulness ≥ Grad×Act's (each scope; the paired interval of gradxact − laya says whether the
  difference is resolved);
- α-guided exit saves ≥ 20 % of layer computations at ≤ 1 % cross-entropy increase, and ≥ 80 % of the oracle's
  saving;
- the tuned lens has its paper's shape: KL to the final distribution falls with depth and sits below the logit
  lens's at every layer (a check that the baselines are built right).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from .say import say


def laya(*args: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "laya_cli", *args], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"laya {args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(proc.stdout, end="")
    return time.perf_counter() - started


def lens_goal(metrics: dict) -> tuple[bool, bool]:
    rows = metrics["layers"]
    tuned = [r["tuned_kl"] for r in rows]
    falls = all(b <= a + 1e-9 for a, b in zip(tuned, tuned[1:]))
    below = all(r["tuned_kl"] <= r["logit_kl"] + 1e-9 for r in rows[:-1])
    return falls, below


def faithfulness_goal(doc: dict, scope: str) -> str:
    methods = doc["methods"] if scope == "head" else doc["network"]["methods"]
    laya, gxa = methods["laya"]["faithfulness"], methods["gradxact"]["faithfulness"]
    line = f"{scope} scope: laya {laya:.3f}, gradxact {gxa:.3f}"
    d = (methods["gradxact"].get("vs_laya") or {}).get("faithfulness")
    if d:
        line += f" (gradxact − laya {d['difference']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}])"
    return line + (" — met" if laya >= gxa else " — MISSED")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("lm-goals"))
    p.add_argument("--epochs", default="2")
    p.add_argument("--objective", default="kl")
    p.add_argument("--layer-dropout", default="0.3")
    p.add_argument("--block-size", default="128")
    p.add_argument("--samples", default="2000")
    p.add_argument("--exit-tokens", default="20000")
    a = p.parse_args(argv)
    if not (a.model / "config.json").is_file():
        say(f"skipped: no model at {a.model} (python -m benchmarks.causal_lm --out DIR makes one)")
        return
    a.out.mkdir(parents=True, exist_ok=True)
    ckpt, info, audit, depth = (a.out / n for n in ("lm.pt", "info.json", "audit.json", "depth.json"))
    times = {}
    times["train"] = laya("train", "--task", "lm", "--backbone", f"hf:{a.model}", "--dataset", f"text:{a.corpus}",
                          "--epochs", a.epochs, "--objective", a.objective, "--layer-dropout", a.layer_dropout,
                          "--block-size", a.block_size, "--out", str(ckpt), "--quiet")  # fmt: skip
    (info).write_text(subprocess.run([sys.executable, "-m", "laya_cli", "info", str(ckpt), "--json"],
                                     capture_output=True, text=True, check=True).stdout)  # fmt: skip
    compare = ("--compare", "laya,ig,gradxact,atp", "--ci", "0.95")
    times["audit"] = laya("audit", str(ckpt), "--scope", "both", *compare, "--samples", a.samples,
                          "--json", str(audit), "--markdown", str(a.out / "audit.md"))  # fmt: skip
    times["depth"] = laya("depth", str(ckpt), "--samples", a.exit_tokens, "--json", str(depth),
                          "--markdown", str(a.out / "depth.md"))  # fmt: skip
    metrics, doc, exits = (json.loads(f.read_text()) for f in (info, audit, depth))
    falls, below = lens_goal(metrics["metrics"])
    say("goals:")
    say(f"  tuned lens KL falls with depth: {'met' if falls else 'MISSED'}; below the logit lens at every layer: "
        f"{'met' if below else 'MISSED'}")  # fmt: skip
    for scope in ("head", "network"):
        say("  α faithfulness ≥ Grad×Act's, " + faithfulness_goal(doc, scope))
    g = exits["goals"]
    say(f"  α-guided exit saves {100 * g['alpha_saving']:.1f} % within 1 % of the model's CE (goal ≥ 20 %: "
        f"{'met' if g['alpha_saves_20pc_within_1pc'] else 'MISSED'}); oracle {100 * g['oracle_saving']:.1f} % "
        f"(goal ≥ 80 % of it: {'met' if g['alpha_reaches_80pc_of_oracle'] else 'MISSED'})")  # fmt: skip
    say("  seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))


if __name__ == "__main__":
    main()
