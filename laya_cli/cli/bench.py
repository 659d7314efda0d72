"""``laya bench``: train every head with every seed, audit each and compare (the job:
``training.bench.run_bench``). The speed benchmarks are the checkout's ``python -m benchmarks``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..runtime import progress
from .common import console, pick_device, print_tables, write_outputs
from .options import (
    AUDIT,
    BENCH,
    Ablation,
    BaseSeed,
    BenchAlign,
    BenchAuditSamples,
    BenchAuditSeed,
    BenchHeads,
    BenchObjectives,
    BenchOut,
    BenchSeeds,
    BlockSize,
    Compare,
    Device,
    EvalTokens,
    JobOptions,
    JsonOut,
    LayerDropout,
    MarkdownOut,
    Quiet,
    Redo,
    Reduce,
    Steps,
    Target,
    Task,
    train_request,
    with_job_options,
)

HEADS = ",".join(BENCH.heads)  # the default of --heads, as one would type it
LM_EVAL_TOKENS = 20_000  # --eval-tokens, as laya train --task lm
LM_COMPARE = "gradxact"  # a language model's bench audits α and Grad×Act unless --compare says otherwise


@dataclass(frozen=True)
class LmBench:
    """``laya bench``'s options that ``--task lm`` reads besides the shared ones."""

    objective: str
    block_size: int | None
    eval_tokens: int
    layer_dropout: float
    seeds: int
    base_seed: int
    out: Path
    compare: str
    audit_samples: int


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
    task: Task = "classify",
    objective: BenchObjectives = "kl",
    block_size: BlockSize = None,
    eval_tokens: EvalTokens = LM_EVAL_TOKENS,
    layer_dropout: LayerDropout = 0.0,
):
    """Train every head with every seed, audit each, and print the paper's comparison tables (--task lm: the LAYA
    head and the tuned lens of a causal language model, per layer, over seeds)."""
    from ..runtime.config import AuditSettings
    from ..runtime.errors import LayaError, match_choice
    from ..runtime.fileio import check_outputs
    from ..training import bench as B

    lm_only = (objective, block_size, eval_tokens, layer_dropout) != ("kl", None, LM_EVAL_TOKENS, 0.0)
    if match_choice("--task", task, ("classify", "lm")) == "lm":
        if heads != HEADS:
            raise LayaError("--heads: a language model's bench trains the LAYA head and the tuned lens together")
        audit = AuditSettings(ablation=ablation, target=target, reduce=reduce, steps=steps, seed=audit_seed)
        lm = LmBench(objective, block_size, eval_tokens, layer_dropout, seeds, base_seed, out, compare, audit_samples)
        return bench_language_model(job, lm, audit, redo, pick_device(device), quiet, (json_out, markdown))
    if lm_only:
        raise LayaError("--objective, --block-size, --eval-tokens and --layer-dropout apply to --task lm")
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

    wide = print_tables(bench_rich_tables(result))
    wide.print(bench_caption(result), style="dim", highlight=False)
    if not quiet:
        console.print(f"{bench_counts(result)} in {result.wall_seconds:.0f} s -> {req.folder}", highlight=False)
    write_outputs(json_out, result.to_json, markdown, lambda: bench_markdown(result))


def log_bench_run(name: str, result, files) -> None:
    """``--log-to``: the comparison as one tracker run (``LayaCommand`` ends it)."""
    from ..runtime.tracking.events import log_bench
    from .command import current_run

    log_bench(current_run().track(f"bench {name}"), result.to_dict(), files)


def bench_language_model(job, o: LmBench, audit, redo: bool, device: str, quiet: bool, files) -> None:
    """``--task lm``: every (objective, seed) run trained and audited (training/bench_lm.py); the tables, the JSON
    and the Markdown asked for."""
    from ..report.lm import lm_bench_markdown, lm_bench_tables
    from ..runtime.fileio import check_outputs, strict_json
    from ..training.bench_lm import LMBenchRequest, run_lm_bench
    from .train import lm_request

    check_outputs(*files)
    template = lm_request(job, "model.pt", "kl", o.block_size, o.eval_tokens, o.layer_dropout, o.base_seed, device)
    req = LMBenchRequest(
        train=template,
        objectives=o.objective.split(","),
        seeds=o.seeds,
        base_seed=o.base_seed,
        out=str(o.out),
        compare=LM_COMPARE if o.compare == BENCH.compare else o.compare,
        audit=audit,
        audit_samples=o.audit_samples,
        redo=redo,
    )
    with progress.enabled(not quiet):
        doc = run_lm_bench(req, None if quiet else print_lm_run)
    print_tables(lm_bench_tables(doc))
    write_outputs(files[0], lambda: strict_json(doc), files[1], lambda: lm_bench_markdown(doc))
    if not quiet:
        console.print(f"{len(doc['runs'])} runs in {doc['wall_seconds']:.0f} s -> {doc['bench']['folder']}")


def print_lm_run(rec: dict, i: int, n: int) -> None:
    laya = rec["metrics"]["heads"]["laya"]
    what = "trained" if rec["trained"] else "reused"
    console.print(
        f"[{i}/{n}] objective {rec['objective']} seed {rec['seed']}  laya KL {laya['kl']:.4f} CE {laya['ce']:.4f} "
        f"bits/token  ({what})",
        highlight=False,
    )
