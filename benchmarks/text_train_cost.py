"""Frozen text training at the model's own cost (issue 73): ``laya train`` of a LAYA head on a frozen
all-MiniLM-L6-v2 against the model's plain forward over the same texts, each cell in a fresh process.

    python -m benchmarks.text_train_cost [--model DIR] [--data CSV] [--texts 2000] [--max-length 32]
                                         [--cells 3] [--threads 1] [--set OPTION=VALUE ...] [--out DIR]

The model: all-MiniLM-L6-v2 (``benchmarks.minilm.minilm_dir``; ``--model DIR``: any ``hf:`` text model's folder).
The data: ``--texts`` WordNet noun glosses, an eighth from each of 8 lexicographer files
(``benchmarks.minilm.wordnet_csv``), or ``--data CSV``. The training: what ``laya train --backbone hf:MODEL
--dataset csv:CSV --max-length 32`` runs (``training.job.train``), laya's defaults otherwise (``--set epochs=5``
changes one), timed in the process from the request to the written checkpoint, its imports done before (timm's
too, which the checkpoint's version record imports) — the whole job: the dataset read
and tokenised, the backbone built, every split's features extracted (into a feature cache of its own, empty: the
first run's cost), what the defaults add (the frozen transformer's network alignment term and the removals it
caches), the head's epochs, the test split's predictions, the checkpoint written. The forward: the model's own
(``transformers.AutoModel``, no grad) over the same tokens — every split's, each text once, as laya tokenised them
— in batches of the training's batch size, before and after the training; ratio = train / the mean of the two
forwards, in wall-clock seconds and in the process's CPU seconds (``cpu_*``: on a shared machine another process's
load is in the first and not in the second). Then once more the forward as laya's extraction batches the texts
(``forward_by_length``: each split from its shortest text to its longest, each batch cut to its own longest — the
extraction's floor, quicker than the padded forward where texts are shorter than ``--max-length``). Each cell also
prints where the job's time went (``PARTS``: timers around the job's steps).

Goal (issue 73): the training ≤ 1.3× the forward on a CPU. Run it under ``OMP_NUM_THREADS=1 nice -n 5`` on a shared
machine; the per-cell load average is printed beside each cell.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

# The job's steps timed, as (module attribute, what the table calls it); a class's method as "Class.method".
PARTS = (
    ("load_dataset", "read"),
    ("prepare_backbone", "backbone"),
    ("tokenize_splits", "tokenise"),
    ("DatasetData.features", "extract"),
    ("_network_alignment", "network term"),
    ("_fit", "head epochs"),
    ("_tested", "test"),
    ("_write_checkpoint", "write"),
)


def say(line: str) -> None:
    print(line, flush=True)


def load_average() -> float:
    return os.getloadavg()[0]


def request(model: Path, data: Path, out: Path, max_length: int, options: dict):
    """The ``TrainJobSettings`` of ``laya train --backbone hf:MODEL --dataset csv:DATA --max-length N [options]``,
    resolved as the command resolves it (the run's seed draws the split; the device picked)."""
    from laya_cli.runtime.declare import build, evolve
    from laya_cli.runtime.device import resolved
    from laya_cli.training.settings import TrainJobSettings

    values = {"backbone": f"hf:{model}", "dataset": f"csv:{data}", "max_length": max_length, **options}
    req = build(TrainJobSettings, values, out=str(out))
    req = evolve(req, data=evolve(req.data, seed=req.train.seed), train=resolved(req.train))
    req.validate()
    return req


def every_split(req) -> list:
    """Every split's tokens (N×2×L), as ``laya train`` tokenises them (a tokenizer-less model's trained first)."""
    from laya_cli.data.datasets import load_dataset
    from laya_cli.data.text import tokenize_splits
    from laya_cli.training.job import prepare_backbone

    data = load_dataset(req.data)
    data = tokenize_splits(data, prepare_backbone(req, data))
    return [s.images for s in (data.train, data.val, data.test) if s is not None]


def forward_seconds(model, splits: list, batch: int, by_length: bool = False) -> float:
    """The model's own forward over each split's tokens in batches of ``batch``, no grad: padded to the max length
    as tokenised, or (``by_length``) as laya's extraction batches them — each split's texts from the shortest to the
    longest, each batch cut to its own longest (``features.extraction.length_order``)."""
    import torch

    from laya_cli.features.extraction import length_order

    start = time.perf_counter()
    with torch.no_grad():
        for tokens in splits:
            tokens = tokens[length_order(tokens)] if by_length else tokens
            for x in tokens.long().split(batch):
                if by_length:
                    x = x[:, :, : int(x[:, 1].sum(1).max())]
                model(input_ids=x[:, 0], attention_mask=x[:, 1])
    return time.perf_counter() - start


@contextmanager
def timed_parts(seconds: dict):
    """``PARTS`` of ``training.job`` wrapped in timers adding into ``seconds`` (outermost call only)."""
    from laya_cli.training import job

    saved, depth = [], [0]

    def timer(fn, label):
        def timed(*args, **kwargs):
            depth[0] += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - start

        return timed

    for name, label in PARTS:
        owner, attr = (getattr(job, name.split(".")[0]), name.split(".")[1]) if "." in name else (job, name)
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, timer(getattr(owner, attr), label))
    try:
        yield seconds
    finally:
        for owner, attr, fn in reversed(saved):
            setattr(owner, attr, fn)


def cell(args) -> dict:
    """One cell, in this process: the forward, the training job, the forward again."""
    import timm  # noqa: F401  (imported by the checkpoint's version record: an import, not the job's work)
    import torch
    from transformers import AutoModel

    from laya_cli.training.job import train

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="text-train-cost-"))
    os.environ["LAYA_CACHE_DIR"] = str(work / "cache")  # an empty feature cache: the features extracted
    req = request(args.model, args.data, work / "head.pt", args.max_length, args.options)
    splits = every_split(req)
    model = AutoModel.from_pretrained(args.model).eval()
    c0 = time.process_time()
    before = forward_seconds(model, splits, req.train.batch_size)
    c1 = time.process_time()
    parts: dict[str, float] = {}
    with timed_parts(parts):
        start = time.perf_counter()
        ckpt = train(req)
        seconds = time.perf_counter() - start
    c2 = time.process_time()
    after = forward_seconds(model, splits, req.train.batch_size)
    c3 = time.process_time()
    by_length = forward_seconds(model, splits, req.train.batch_size, by_length=True)
    parts["rest"] = seconds - sum(parts.values())
    config = ckpt["train_config"]
    cpu_forward, cpu_train = [c1 - c0, c3 - c2], c2 - c1
    return {"texts": sum(map(len, splits)), "batch": req.train.batch_size, "forward": [before, after],
            "train": seconds, "ratio": seconds / ((before + after) / 2), "forward_by_length": by_length,
            "cpu_forward": cpu_forward, "cpu_train": cpu_train,
            "cpu_ratio": cpu_train / (sum(cpu_forward) / 2), "parts": parts, "epochs": len(ckpt["history"]),
            "align": config["align"], "align_target": config["align_target"]}  # fmt: skip


def summary(cells: list[dict]) -> list[str]:
    """The table of the cells and their spread."""
    rows = ["| cell | load | forwards s | train s | ratio | × quicker forward | forward by length s | × it | "
            "CPU: forwards s | train s | ratio | " + " | ".join(p for _, p in PARTS) + " | rest |",
            "|" + "---|" * (11 + len(PARTS) + 1)]  # fmt: skip
    for i, c in enumerate(cells, 1):
        f, cf = c["forward"], c["cpu_forward"]
        parts = " | ".join(f"{c['parts'].get(p, 0.0):.1f}" for _, p in (*PARTS, ("", "rest")))
        rows.append(f"| {i} | {c['load'][0]:.2f}–{c['load'][1]:.2f} | {f[0]:.1f}, {f[1]:.1f} | {c['train']:.1f} | "
                    f"{c['ratio']:.2f}× | {c['train'] / min(f):.2f}× | {c['forward_by_length']:.1f} | "
                    f"{c['train'] / c['forward_by_length']:.2f}× | {cf[0]:.1f}, {cf[1]:.1f} | "
                    f"{c['cpu_train']:.1f} | {c['cpu_ratio']:.2f}× | {parts} |")  # fmt: skip
    ratios = [c["ratio"] for c in cells]
    cpu = [c["cpu_ratio"] for c in cells]
    rows.append(
        f"ratio: median {statistics.median(ratios):.2f}×, min {min(ratios):.2f}×, max {max(ratios):.2f}×; "
        f"in CPU seconds: median {statistics.median(cpu):.2f}×, min {min(cpu):.2f}×, max {max(cpu):.2f}×"
    )
    return rows


def options_of(pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` as settings values (JSON where it parses: numbers, booleans)."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key.replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            out[key.replace("-", "_")] = value
    return out


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.text_train_cost", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="a text model's folder (default: all-MiniLM-L6-v2)")
    p.add_argument("--data", type=Path, help="a text,label CSV (default: --texts WordNet glosses)")
    p.add_argument("--texts", type=int, default=2000, help="WordNet glosses, a multiple of 8")
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--cells", type=int, default=3, help="fresh processes, one after the other")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", dest="pairs", action="append", default=[], metavar="OPTION=VALUE",
                   help="a laya train setting by its name (epochs=5, align=0)")  # fmt: skip
    p.add_argument("--out", type=Path, help="where the CSV and the cells' JSON lines go")
    p.add_argument("--cell", action="store_true", help="one cell in this process; one JSON line")
    args = p.parse_args(argv)
    for flag, value, least in (("--texts", args.texts, 8), ("--max-length", args.max_length, 2),
                               ("--cells", args.cells, 1), ("--threads", args.threads, 1)):  # fmt: skip
        if value < least:
            p.error(f"{flag} must be at least {least}, got {value}")
    args.options = options_of(args.pairs)
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.cell:
        print(json.dumps(cell(args)), flush=True)
        return 0
    from .minilm import minilm_dir, wordnet_csv

    out = args.out or Path(tempfile.mkdtemp(prefix="text-train-cost-"))
    out.mkdir(parents=True, exist_ok=True)
    model = args.model or minilm_dir()
    data = args.data or wordnet_csv(out / "glosses.csv", per_class=args.texts // 8)
    if model is None or data is None:
        say("skipped: " + ("all-MiniLM-L6-v2 cannot be had here" if model is None else "WordNet is not installed"))
        return 0
    say(f"text_train_cost: {model} on {data}, --max-length {args.max_length}, {args.threads} thread(s) -> {out}")
    cmd = [sys.executable, "-m", "benchmarks.text_train_cost", "--cell", "--model", str(model), "--data", str(data),
           "--max-length", str(args.max_length), "--threads", str(args.threads),
           *(f"--set={p}" for p in args.pairs)]  # fmt: skip
    cells = []
    for i in range(args.cells):
        load = load_average()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
        if r.returncode != 0:
            say(f"cell {i + 1} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
            return 1
        got = json.loads(r.stdout.strip().splitlines()[-1]) | {"load": [load, load_average()]}
        cells.append(got)
        say(json.dumps(got))
    (out / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells))
    first = cells[0]
    say(f"{first['texts']} texts, batches of {first['batch']}, {first['epochs']} epochs, align {first['align']} "
        f"({first['align_target']}); goal: train ≤ 1.3× the forward")  # fmt: skip
    for line in summary(cells):
        say(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
