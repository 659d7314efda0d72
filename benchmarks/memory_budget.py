"""Peak memory of the network-scope IG audit of the built-in CNN, unbounded vs within ``--max-memory 2G``, and
whether the two give the same numbers.

    python -m benchmarks.memory_budget [--samples 256] [--budgets none,2G] [--data-dir DIR] [--steps 32]
    python -m benchmarks.memory_budget ...   (from a checkout: the same, through a thin shim)

Setup (not measured): the built-in ``cnn`` (4 stages of 32, 64, 128, 256 channels; on 28×28 grey images the
first stage's activation is 32×28×28) with a LAYA head over its 4 stages, seeded random weights (memory does
not depend on them), saved as a checkpoint of Fashion-MNIST with its tap means (the network reference)
computed over 64 seeded random images. Fashion-MNIST's test split is read from ``--data-dir`` (default: where
Debian's ``dataset-fashion-mnist`` installs it).

Each cell is one fresh process running the command itself,

    laya audit MODEL --scope network --compare ig --samples 256 --ig-tol 0 --json OUT.json -q [--max-memory 2G]

(``--ig-tol 0``: every sample at all 32 steps, the case of issue 25 and IG's most memory; with the default
tolerance most samples stop at 16 steps and the first pass holds half the rows.)
whose JSON reports its own peak RSS (``peak_memory_mb``: VmHWM, the whole process, Python and torch
included) beside its budget. "unbounded" passes ``--max-memory 1024G``, a budget no plan reaches, so the
audit runs as it did before budgets existed: 256 samples × 32 steps = 8,192 rows in one IG pass. The
results must be equal: every number of the JSON's ``network`` block is compared and the largest
difference printed (IG's steps then run in chunks, so equal up to float32 rounding of their sum).
Target: the bounded peak ≤ the budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FMNIST = "/usr/share/datasets/fashion-mnist"
UNBOUNDED = "1024G"  # a budget no plan reaches: the batch and IG's rows as without --max-memory


def make_checkpoint(out: Path, data_dir: str, seed: int = 0) -> Path:
    """The CNN + LAYA head of the module doc, saved as a Fashion-MNIST checkpoint with its tap means."""
    import torch

    from laya_cli.backbones.build import BackboneSpec, build_backbone
    from laya_cli.features.extraction import tap_means, to_float_images
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import LayaModel
    from laya_cli.model.settings import HeadSettings
    from laya_cli.runtime import progress

    torch.manual_seed(seed)
    spec = BackboneSpec("cnn", finetune=True, in_channels=1, image_size=(28, 28))
    backbone = build_backbone(spec).eval()
    g = torch.Generator().manual_seed(seed + 1)
    images = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8, generator=g)
    with torch.no_grad(), progress.enabled(False):
        feats = backbone(to_float_images(images))
        taps = tap_means(backbone, images)
    dims = [f.shape[-1] for f in feats]
    head = build_head("laya", dims, 10).eval()
    model = LayaModel(
        backbone, head, backbone.spec or spec, "laya", [str(c) for c in range(10)], [f.mean(0) for f in feats]
    )
    model.checkpoint = {
        "head": {"config": HeadSettings().to_dict()},
        "dims": dims,
        "dataset": {"name": "fashion-mnist", "data_dir": data_dir, "seed": 1337},
        "tap_reference": taps,
    }
    return model.save(out)


def audit_cell(model: Path, out: Path, samples: int, steps: int, budget: str | None) -> dict:
    """One ``laya audit`` in a fresh process: its JSON, and its wall time."""
    cmd = [sys.executable, "-m", "laya_cli", "audit", str(model), "--scope", "network", "--compare", "ig"]
    cmd += [
        "--samples",
        str(samples),
        "--steps",
        str(steps),
        "--ig-tol",
        "0",
        "--json",
        str(out),
        "-q",
        "--device",
        "cpu",
    ]
    cmd += ["--max-memory", budget or UNBOUNDED]
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"laya audit failed:\n{r.stdout}\n{r.stderr}")
    return {"budget": budget, "seconds": time.perf_counter() - start, "doc": json.loads(out.read_text())}


def numbers(doc, path: str = "") -> dict[str, float]:
    """Every number of a JSON document by its path."""
    if isinstance(doc, dict):
        return {k: v for key, sub in doc.items() for k, v in numbers(sub, f"{path}/{key}").items()}
    if isinstance(doc, list):
        return {k: v for i, sub in enumerate(doc) for k, v in numbers(sub, f"{path}[{i}]").items()}
    return {path: float(doc)} if isinstance(doc, (int, float)) and not isinstance(doc, bool) else {}


def compare(a: dict, b: dict) -> tuple[int, int, float]:
    """(numbers compared, how many differ, the largest absolute difference) of two ``network`` blocks."""
    x, y = numbers(a), numbers(b)
    keys = sorted(set(x) & set(y))
    diffs = [abs(x[k] - y[k]) for k in keys if x[k] != y[k] and not (x[k] != x[k] and y[k] != y[k])]
    return len(keys), len(diffs), max(diffs, default=0.0)


def run(samples: int = 256, steps: int = 32, budgets=(None, "2G"), data_dir: str = FMNIST) -> dict:
    if not (Path(data_dir) / "t10k-images-idx3-ubyte.gz").exists():
        raise FileNotFoundError(f"no Fashion-MNIST under {data_dir} (pass --data-dir)")
    with tempfile.TemporaryDirectory() as tmp:
        model = make_checkpoint(Path(tmp) / "cnn.pt", data_dir)
        cells = [audit_cell(model, Path(tmp) / f"{i}.json", samples, steps, b) for i, b in enumerate(budgets)]
    rows = []
    for c in cells:
        d = c["doc"]
        rows.append(
            {
                "budget": c["budget"] or "unbounded",
                "budget_mb": d.get("memory_budget_mb"),
                "peak_mb": d.get("peak_memory_mb"),
                "estimate_mb": d.get("memory_estimate_mb"),
                "batch_size": d["settings"]["batch_size"],
                "internal_batch_size": d["settings"]["internal_batch_size"],
                "seconds": c["seconds"],
            }
        )
    n, differ, largest = compare(cells[0]["doc"]["network"], cells[-1]["doc"]["network"])
    return {"samples": samples, "steps": steps, "rows": rows, "compared": n, "differ": differ, "max_diff": largest}


def report(r: dict) -> str:
    lines = [
        f"laya audit --scope network --compare ig: built-in cnn (first stage 32×28×28) + LAYA head, "
        f"{r['samples']} Fashion-MNIST test images, {r['steps']} IG steps, one fresh process per cell",
        f"{'budget':<11}{'peak RSS MiB':>13}{'estimate':>10}{'batch':>7}{'IG rows/pass':>14}{'seconds':>9}   target",
    ]
    for row in r["rows"]:
        rows = row["internal_batch_size"] or min(row["batch_size"], r["samples"]) * r["steps"]
        bounded = row["budget"] != "unbounded"
        target = f"peak ≤ {row['budget_mb']:,.0f} MiB: {'met' if row['peak_mb'] <= row['budget_mb'] else 'MISSED'}"
        lines.append(
            f"{row['budget']:<11}{row['peak_mb']:>13,.0f}{row['estimate_mb']:>10,.0f}{row['batch_size']:>7}"
            f"{rows:>14,}{row['seconds']:>9.1f}   {target if bounded else '—'}"
        )
    a, b = r["rows"][0], r["rows"][-1]
    lines.append(
        f"peak {b['budget']} / {a['budget']} = {b['peak_mb'] / a['peak_mb']:.2f}×; results: {r['differ']} of "
        f"{r['compared']} numbers of the network block differ, largest by {r['max_diff']:.2e}   "
        f"(target: equal up to float rounding, ≤ 1e-6)"
    )
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--budgets", default="none,2G", help="comma list; none = unbounded (all the free memory)")
    ap.add_argument("--data-dir", default=FMNIST)
    args = ap.parse_args(argv)
    budgets = [None if b.lower() == "none" else b for b in args.budgets.split(",") if b]
    r = run(args.samples, args.steps, budgets, args.data_dir)
    from .say import say

    say(report(r))
    return r


if __name__ == "__main__":
    main()
