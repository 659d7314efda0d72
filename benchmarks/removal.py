"""How a layer is removed inside the network, side by side: mean, bypass and mean-update on a real model.

    python -m benchmarks.removal CHECKPOINT [--samples 200] [--out DIR] [--ablations mean,bypass,mean-update]

Runs ``laya audit CHECKPOINT --scope both --compare ig,gradxact,atp --ablation A`` once per removal A (the command a
user types, a subprocess each) and prints, per removal, the mean total effect of each layer on p_ŷ and each
method's faithfulness and Deletion@1 against those effects, with their 95 % intervals. The question it answers
(docs/metrics.md, "Removing a layer"): does the removal tell layers apart, or does every removal wipe the
residual stream? Without a checkpoint it trains none: pass one (``benchmarks.minilm`` writes the MiniLM one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def audit(checkpoint: Path, ablation: str, samples: int, out: Path) -> dict:
    path = out / f"audit-{ablation}.json"
    cmd = [sys.executable, "-m", "laya_cli", "audit", str(checkpoint), "--scope", "both",
           "--compare", "ig,gradxact,atp", "--ablation", ablation, "--samples", str(samples),
           "--json", str(path), "-q"]  # fmt: skip
    print("$ laya " + " ".join(cmd[3:]), flush=True)
    if subprocess.run(cmd).returncode not in (0, 1):
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return json.loads(path.read_text())


def interval(scores: dict, metric: str) -> str:
    ci = (scores.get("ci") or {}).get(metric)
    value = scores.get(metric)
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]" if ci else "")


def table(docs: dict[str, dict]) -> str:
    """Markdown: mean total effect per layer per removal, then each method's faithfulness and Deletion@1."""
    first = next(iter(docs.values()))
    layers = list(first["network"]["scopes"]["layers"])
    lines = ["| layer | " + " | ".join(f"mean Δ ({a})" for a in docs) + " |", "|---" * (len(docs) + 1) + "|"]
    for name in layers:
        cells = [f"{d['network']['scopes']['layers'][name]['delta_network']:.4f}" for d in docs.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| method | removal | faithfulness (95 % CI) | Deletion@1 (95 % CI) |", "|---|---|---|---|"]
    for method in first["network"]["methods"]:
        for ablation, d in docs.items():
            scores = d["network"]["methods"][method]
            lines.append(
                f"| {method} | {ablation} | {interval(scores, 'faithfulness')} | {interval(scores, 'deletion@1')} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("removal-run"))
    parser.add_argument("--ablations", default="mean,bypass,mean-update")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    docs = {a: audit(args.checkpoint, a, args.samples, args.out) for a in args.ablations.split(",")}
    text = table(docs)
    (args.out / "removal.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
