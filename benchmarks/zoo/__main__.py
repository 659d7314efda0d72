"""``python -m benchmarks.zoo``: the conformance table over the zoo, or ``--sweep`` over whole families.

python -m benchmarks.zoo [--only NAME,NAME] [--no-pipeline] [--markdown FILE]
python -m benchmarks.zoo --sweep [--source timm,torchvision,hf] [--only NAME,NAME] [--markdown FILE]
python -m benchmarks.zoo --sweep --source hf --all [--only T,T] [--json F] [--markdown F] [--timeout S] [--rerun F]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from .conformance import ZOO, ZooModel, ZooResult, _format_text, _widths_text, markdown, run_one
from .sweep import READ_BY, SOURCES, counts, run_sweep, sweep_markdown


def main(argv: list[str] | None = None) -> list[ZooResult]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated backbone names (default: the whole zoo)")
    parser.add_argument("--no-pipeline", action="store_true", help="structure checks only (no train/audit/export)")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    parser.add_argument(
        "--sweep", action="store_true", help="one small model per timm family and every torchvision classifier"
    )
    parser.add_argument("--source", help="with --sweep: comma-separated sources (default: all of them)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="with --sweep: torch threads (default 1: small models at small inputs gain nothing from more, and "
        "OpenMP threads that wait for a busy core make each op up to 100× slower)",
    )
    parser.add_argument(
        "--all", action="store_true", help="with --sweep --source hf: every model type transformers ships (hf_all.py)"
    )
    parser.add_argument("--json", help="with --all: write the rows as JSON (rewritten after every model)")
    parser.add_argument("--rerun", help="with --all: keep the rows of this earlier --json that passed, run the rest")
    parser.add_argument("--timeout", type=float, default=120.0, help="with --all: seconds per model (default 120)")
    args = parser.parse_args(argv)
    os.environ.setdefault("LAYA_OFFLINE", "1")
    if args.sweep and args.all:
        torch.set_num_threads(args.threads)
        return hf_all_main(args)
    if args.sweep:
        torch.set_num_threads(args.threads)
        return sweep_main(args.source, args.only, args.markdown)
    entries = ZOO
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        entries = [e for e in ZOO if e.name in wanted] or [ZooModel(n, "?", 64) for n in wanted]
    from rich.console import Console
    from rich.table import Table

    from laya_cli.runtime import progress

    progress.set_enabled(False)
    console = Console(width=160)
    results = []
    with tempfile.TemporaryDirectory(prefix="laya-zoo-") as tmp:
        os.environ["LAYA_CACHE_DIR"] = str(Path(tmp) / "cache")
        for entry in entries:
            r = run_one(entry, Path(tmp), pipeline=not args.no_pipeline)
            status = "pass" if r.passed else f"FAIL {r.error[:100]}"
            print(f"{entry.name:42s} {len(r.taps):3d} taps  {r.seconds:6.1f}s  {status}", file=sys.stderr, flush=True)
            results.append(r)
    table = Table(
        title="laya backbone zoo (random weights; "
        + ("structure + train/audit/export)" if not args.no_pipeline else "structure only)")
    )
    for col in ("model", "family", "taps", "widths", "format", "pass", "seconds"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for r in results:
        table.add_row(
            r.model.name,
            r.model.family,
            str(len(r.taps)),
            _widths_text(r.widths),
            _format_text(r.formats),
            "yes" if r.passed else f"no: {r.error[:60]}",
            f"{r.seconds:.1f}",
        )
    console.print(table)
    n_ok = sum(r.passed for r in results)
    console.print(
        f"{n_ok} of {len(results)} architectures pass "
        f"({sum(e.name.startswith('timm:') for e in entries)} timm, "
        f"{sum(e.name.startswith('torchvision:') for e in entries)} torchvision)."
    )
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, not args.no_pipeline))
    return results


def sweep_main(source: str | None, only: str | None, markdown_file: str | None) -> list[ZooResult]:
    """``--sweep``: run the sources, print a table and the counts per source, write the Markdown."""
    from rich.console import Console
    from rich.table import Table

    from laya_cli.runtime import progress

    split = lambda text: [n.strip() for n in (text or "").split(",") if n.strip()]
    sources = split(source) or list(SOURCES)
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise SystemExit(f"unknown source {unknown[0]}; the sources are {', '.join(SOURCES)}")
    progress.set_enabled(False)
    start = time.perf_counter()
    results = run_sweep(sources, split(only), say=lambda line: print(line, file=sys.stderr, flush=True))
    seconds = time.perf_counter() - start
    table = Table(title="laya backbone zoo sweep (random weights; default taps)")
    for col in ("model", "family", "taps", "widths", "formats", "read by", "input", "seconds"):
        table.add_column(col, justify="right" if col in ("input", "seconds") else "left")
    for r in (r for rs in results.values() for r in rs):
        taps = str(len(r.taps)) if r.passed else f"fails: {r.error[:60]}"
        formats = _format_text(r.formats)
        table.add_row(
            r.model.name,
            r.model.family,
            taps,
            _widths_text(r.widths),
            formats,
            READ_BY.get(r.engine, ""),
            str(r.model.size),
            f"{r.seconds:.1f}",
        )
    console = Console(width=200)
    console.print(table)
    for line in counts(results):
        console.print(line)
    console.print(f"the whole sweep: {seconds / 60:.1f} min (python -m benchmarks.zoo {' '.join(sys.argv[1:])})")
    if markdown_file:
        Path(markdown_file).write_text(sweep_markdown(results, seconds))
    return [r for rs in results.values() for r in rs]


def hf_all_main(args) -> list:
    """``--sweep --source hf --all``: every transformers model type, one forked child each (``hf_all.py``)."""
    from laya_cli.runtime import progress

    from .hf_all import markdown as all_markdown
    from .hf_all import summary, sweep_all

    if args.source not in (None, "hf"):
        raise SystemExit("--all sweeps transformers' model types: use it with --source hf")
    progress.set_enabled(False)
    only = [n.strip() for n in (args.only or "").split(",") if n.strip()]
    start = time.perf_counter()
    say = lambda line: print(line, file=sys.stderr, flush=True)
    rows = sweep_all(only, args.timeout, say=say, json_file=args.json, rerun=args.rerun)
    for line in summary(rows):
        print(line)
    if args.markdown:
        Path(args.markdown).write_text(all_markdown(rows, time.perf_counter() - start))
    return rows


if __name__ == "__main__":
    results = main()
    sys.exit(0 if all(getattr(r, "passed", getattr(r, "status", "") != "crash") for r in results) else 1)
