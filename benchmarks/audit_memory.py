"""Peak memory of `laya audit` on 1,000 vs 10,000 samples, each in a fresh process.

    python -m benchmarks.audit_memory [--dataset fashion-mnist] [--sizes 1000,10000] [--compare ig,gradxact]
                                      [--model MODEL.pt] [--batch-size 256]

Setup (not measured): the paper MLP + LAYA head trained for one epoch on the dataset (or
``--model``). Then, for every size N and two ways of holding the features, a fresh Python
process audits N test samples and reports its own peak resident set size
(``memory.peak_rss_mb``):

  streamed      what the command does (``laya audit MODEL --samples N``: ``load_eval_data(stream=True)``
                then ``run_audit``). Without a feature cache (fine-tuned built-ins, ``--no-cache``)
                the backbone runs batch by batch inside the audit, so features are never all in memory.
  materialised  the same audit with every feature extracted up front
                (``load_eval_data(stream=False)``): what a frozen backbone read from the feature
                cache holds.

Each process also reports its RSS after the imports and the model are loaded (the floor both
sizes share); "audit" is the peak above that floor: loading the dataset (every split, as the
command does), the features and the audit itself. Printed side by side with the ratio
10,000 / 1,000. RSS counts everything a process touched (Python, torch's libraries, allocator
caches), so compare processes of the same kind only. On Linux the peak is VmHWM.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from .memory import peak_rss_mb, rss_mb

# --------------------------------------------------------------------------- the measured child


def child(model: str, samples: int, mode: str, compare: str, batch_size: int, data_dir: str | None) -> dict:
    """One audit in this (fresh) process; returns its peak RSS figures.

    ``streamed`` does what ``laya audit MODEL --samples N`` does (the command only parses and
    renders around these calls); ``materialised`` extracts every feature first.
    """
    import time

    from laya_cli.auditing.head_scope import run_audit
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model
    from laya_cli.runtime import progress

    progress.set_enabled(False)  # a child process of its own: nothing to restore
    # The floor: every import and the model. The audit then loads the dataset (every split, as
    # the command does), its features, and audits.
    m = load_model(model)
    import captum.attr  # noqa: F401
    import pandas  # noqa: F401

    floor = rss_mb()
    start = time.perf_counter()
    data = load_eval_data(m, data_dir=data_dir, samples=samples, stream=mode == "streamed")
    n = run_audit(m, data, parse_methods(compare), AuditSettings(batch_size=batch_size)).n_samples
    return {
        "mode": mode,
        "samples": n,
        "peak_mb": peak_rss_mb(),
        "floor_mb": floor,
        "seconds": time.perf_counter() - start,
    }


def _measure(model: str, samples: int, mode: str, compare: str, batch_size: int, data_dir: str | None) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.audit_memory",
        "--child",
        model,
        "--samples",
        str(samples),
        "--mode",
        mode,
        "--compare",
        compare,
        "--batch-size",
        str(batch_size),
    ]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"audit child failed:\n{r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- setup and report


def _train(dataset: str, data_dir: str | None, out: Path, epochs: int) -> None:
    from laya_cli.data.settings import DataSettings
    from laya_cli.runtime import progress
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    with progress.enabled(False):
        train(
            TrainJobSettings(
                data=DataSettings(dataset, data_dir=data_dir, seed=0),
                train=TrainingSettings(epochs=epochs, patience=epochs, seed=0),
                out=str(out),
            )
        )


def run(
    dataset: str = "fashion-mnist",
    sizes=(1000, 10000),
    compare: str = "ig,gradxact",
    model: str | None = None,
    batch_size: int = 256,
    data_dir: str | None = None,
    epochs: int = 1,
    modes=("streamed", "materialised"),
    in_process: bool = False,
) -> dict:
    """``in_process``: every cell in this process, one after the other (a smoke run of the code path for
    ``python -m benchmarks --quick``: no fresh process, so its memory figures measure nothing)."""
    measure = child if in_process else _measure
    with tempfile.TemporaryDirectory() as tmp:
        if model is None:
            model = str(Path(tmp) / "model.pt")
            _train(dataset, data_dir, Path(model), epochs)
        rows = {mode: [measure(model, n, mode, compare, batch_size, data_dir) for n in sizes] for mode in modes}
    return {
        "dataset": dataset,
        "sizes": list(sizes),
        "compare": compare,
        "batch_size": batch_size,
        "rows": rows,
        "in_process": in_process,
    }


def report(r: dict) -> str:
    lines = [
        f"laya audit peak memory (RSS, MiB): paper MLP + LAYA head, {r['dataset']} test split, "
        f"--compare {r['compare']}, batch {r['batch_size']}, one fresh process per cell",
        f"{'features':<13}{'samples':>9}{'peak':>9}{'floor':>9}{'audit':>9}{'seconds':>9}",
    ]
    for mode, cells in r["rows"].items():
        for c in cells:
            lines.append(
                f"{mode:<13}{c['samples']:>9,}{c['peak_mb']:>9.0f}{c['floor_mb']:>9.0f}"
                f"{c['peak_mb'] - c['floor_mb']:>9.0f}{c['seconds']:>9.1f}"
            )
        if len(cells) >= 2:
            a, b = cells[0], cells[-1]
            grow_a, grow_b = a["peak_mb"] - a["floor_mb"], b["peak_mb"] - b["floor_mb"]
            audit_ratio = f"{grow_b / grow_a:>9.2f}" if grow_a >= 1 else f"{'—':>9}"
            lines.append(
                f"{'':<13}{'ratio':>9}{b['peak_mb'] / a['peak_mb']:>9.2f}{'':>9}{audit_ratio}"
                f"   ({b['samples']:,} vs {a['samples']:,} samples)"
            )
    lines.append("floor = RSS after imports and the model; audit = peak - floor (dataset loading, features, audit)")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--compare", default="ig,gradxact")
    ap.add_argument("--model", default=None, help="audit this checkpoint instead of training one")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--modes", default="streamed,materialised")
    ap.add_argument(
        "--in-process", action="store_true", help="no fresh process per cell: a smoke run, not a measurement"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--samples", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="streamed", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        out = child(args.child, args.samples, args.mode, args.compare, args.batch_size, args.data_dir)
        sys.stdout.write(json.dumps(out) + "\n")  # the one line the parent reads
        return out
    r = run(
        args.dataset,
        [int(s) for s in args.sizes.split(",")],
        args.compare,
        args.model,
        args.batch_size,
        args.data_dir,
        args.epochs,
        [m for m in args.modes.split(",") if m],
        args.in_process,
    )
    Console(width=110).print(report(r), highlight=False)
    return r


if __name__ == "__main__":
    main()
