"""``laya bench``: train every head with every seed, audit each and compare (the job:
``training.bench.run_bench``). The speed benchmarks are the checkout's ``python -m benchmarks``."""

from __future__ import annotations

from pathlib import Path

from ..runtime import progress
from .common import console, pick_device, wide_console
from .options import (
    AUDIT,
    BENCH,
    Ablation,
    BaseSeed,
    BenchAlign,
    BenchAuditSamples,
    BenchAuditSeed,
    BenchHeads,
    BenchOut,
    BenchSeeds,
    Compare,
    Device,
    JobOptions,
    JsonOut,
    MarkdownOut,
    Quiet,
    Redo,
    Reduce,
    Steps,
    Target,
    train_request,
    with_job_options,
)

HEADS = ",".join(BENCH.heads)  # the default of --heads, as one would type it


@with_job_options
def bench(
    job: JobOptions,
    heads: BenchHeads = HEADS,
    align: BenchAlign = BENCH.align,
    seeds: BenchSeeds = BENCH.seeds,
    base_seed: BaseSeed = BENCH.base_seed,
    out: BenchOut = Path(BENCH.out),
    compare: Compare = BENCH.compare,
    audit_samples: BenchAuditSamples = BENCH.audit_samples,
    audit_seed: BenchAuditSeed = AUDIT.seed,
    ablation: Ablation = AUDIT.ablation,
    target: Target = AUDIT.target,
    reduce: Reduce = AUDIT.reduce,
    steps: Steps = AUDIT.steps,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    redo: Redo = BENCH.redo,
    device: Device = "auto",
    quiet: Quiet = False,
):
    """Train every head with every seed, audit each, and print the paper's comparison tables."""
    from ..runtime.config import AuditSettings
    from ..runtime.fileio import check_outputs
    from ..training import bench as B

    with progress.enabled(not quiet):
        check_outputs(json_out, markdown)
        template = train_request(
            job,
            head="laya",
            out="model.pt",
            seed=base_seed,
            resume=False,
            device=pick_device(device),
        )
        req = B.BenchRequest(
            train=template,
            audit=AuditSettings(ablation=ablation, target=target, reduce=reduce, steps=steps, seed=audit_seed),
            heads=B.parse_heads(heads),
            seeds=seeds,
            base_seed=base_seed,
            out=str(out),
            compare=compare,
            audit_samples=audit_samples,
            redo=redo,
            align=align,
        ).validate()
        result = B.run_bench(req, None if quiet else print_run)
    render(result, req, quiet, json_out, markdown)
    log_bench_run(f"{job.dataset}-{job.backbone}", result, [json_out, markdown])


def print_run(o, i: int, n: int) -> None:
    """One line per finished run (a ``RunOutcome``): its test metrics and whether it was trained or reused."""
    m = o.record["metrics"]
    what = "reused" if not o.trained and not o.audited else ("re-audited" if not o.trained else "trained")
    console.print(
        f"[{i}/{n}] {o.head:<9} seed {o.seed}  test acc {m['test_accuracy']:.4f}  macro-F1 "
        f"{m['test_macro_f1']:.4f}  ({what})",
        highlight=False,
    )


def render(result, req, quiet: bool, json_out, markdown) -> None:
    """The comparison tables and their caption; the JSON and Markdown asked for."""
    from ..report.bench import bench_caption, bench_counts, bench_markdown, bench_rich_tables
    from ..runtime.fileio import atomic_write_text

    tables = bench_rich_tables(result)
    wide = wide_console(tables)
    for table in tables:
        wide.print(table)
    wide.print(bench_caption(result), style="dim", highlight=False)
    if not quiet:
        console.print(f"{bench_counts(result)} in {result.wall_seconds:.0f} s -> {req.folder}", highlight=False)
    if json_out is not None:
        atomic_write_text(json_out, result.to_json())
    if markdown is not None:
        atomic_write_text(markdown, bench_markdown(result))


def log_bench_run(name: str, result, files) -> None:
    """``--log-to``: the comparison as one tracker run (``LayaCommand`` ends it)."""
    from ..runtime.tracking.events import log_bench
    from .command import current_run

    log_bench(current_run().track(f"bench {name}"), result.to_dict(), files)
