"""Which layers can go: test accuracy after dropping k interior layers, in the order each heuristic chooses.

    python -m benchmarks.dropping CHECKPOINT [--k 3] [--draws 3] [--json FILE]

Orders (``laya_cli.depthing.dropping``), chosen on the checkpoint's validation split and scored on its test split:
LAYA's mean α (least attended first), Block Influence (ShortGPT: 1 − cos(input, output)), the network-scope bypass
effects, seeded random orders, and a greedy oracle on validation accuracy. A dropped layer is bypassed (its output
:= its input). Prints accuracy [Wilson 95 %] per order and k, and whether α-guided dropping is within 1 pp of the
greedy oracle at 25 % of the layers dropped and ahead of Block Influence (issue 35's goals).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--k", type=int, default=3, help="the most layers dropped")
    parser.add_argument("--draws", type=int, default=3, help="random orders")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from laya_cli.depthing.dropping import drop_table
    from laya_cli.model.evaldata import model_dataset
    from laya_cli.model.laya_model import load_model
    from laya_cli.runtime import progress

    progress.set_enabled(False)
    model = load_model(args.checkpoint)
    _, data = model_dataset(model)
    val, test = (data.val.images, data.val.labels), (data.test.images, data.test.labels)
    table = drop_table(model, val, test, args.k, args.draws)
    n_layers = len(table["layers"])
    print(f"{args.checkpoint}: {n_layers} layers, orders chosen on {len(val[1])} validation samples, "
          f"accuracy on {len(test[1])} test samples (dropped layers bypassed)")  # fmt: skip
    print("order                 " + "".join(f"  k={k:<19d}" for k in range(args.k + 1)))
    by = {}
    for r in table["rows"]:
        by.setdefault(r["order"], []).append(r)
    for name, rows in by.items():
        cells = "".join(f"  {r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" for r in rows)
        print(f"{name:22s}{cells}   order {table['orders'][name][: args.k]}")
    quarter = max(1, math.floor(0.25 * n_layers))
    if quarter <= args.k:
        acc = {name: rows[quarter]["accuracy"] for name, rows in by.items()}
        alpha, greedy, influence = acc["alpha"], acc["greedy"], acc["block-influence"]
        near = "within" if greedy - alpha <= 0.01 else "target missed: more than"
        ahead = "alpha ahead" if alpha > influence else "target missed: alpha not ahead"
        print(f"at k={quarter} (25 % of {n_layers}): alpha {alpha:.3f}, greedy {greedy:.3f} ({near} 1 pp), "
              f"block influence {influence:.3f} ({ahead})")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=1))
    return table


if __name__ == "__main__":
    main()
