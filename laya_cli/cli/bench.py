"""``laya bench``: train every head with every seed, audit each and compare (the job:
``training.bench.run_bench``). The speed benchmarks are the checkout's ``python -m benchmarks``.

The backbone, data and head options are ``TrainRequest``'s declared settings (those a bench varies or fixes
are its own: heads, seeds, the output folder); the audit's four are ``AuditSettings``'."""

from __future__ import annotations

from pathlib import Path

from ..runtime import progress
from ..runtime.config import AuditSettings, LMSettings, TrainRequest
from .common import console, pick_device, print_tables, refuse_device_map, write_outputs
from .declared import Use, with_settings
from .options import (
    BENCH,
    BaseSeed,
    BenchAlign,
    BenchAuditSamples,
    BenchHeads,
    BenchObjectives,
    BenchOut,
    BenchSeeds,
    Compare,
    JsonOut,
    MarkdownOut,
    Quiet,
    Redo,
    Replace,
)

HEADS = ",".join(BENCH.heads)  # the default of --heads, as one would type it
LM_COMPARE = "gradxact"  # a language model's bench audits α and Grad×Act unless --compare says otherwise
# What a bench fixes or varies itself (each run's head, seed and checkpoint) and the training options it does not
# offer (a bench compares the heads under the paper's training).
BENCH_FIXES = (
    "head out resume restart arch input_size seed align_scope stop_on precision layer_norm alpha_entropy "
    "alpha_entropy_schedule tau_start".split()
)
AUDITED = Use(
    AuditSettings,
    only=("ablation", "target", "reduce", "steps", "seed"),
    rename={"seed": "audit_seed"},
    helps={"seed": "Seed of the audited subset and of the random method."},
)


# bench trains the tuned lens with every run (its table is the comparison); --lens-sample and --device-map apply
BENCH_LM_SKIP = ("objective", "lens")


@with_settings(req=Use(TrainRequest, skip=tuple(BENCH_FIXES)), audit=AUDITED, lm=Use(LMSettings, skip=BENCH_LM_SKIP))
def bench(
    heads: BenchHeads = HEADS,
    align: BenchAlign = BENCH.align,
    seeds: BenchSeeds = BENCH.seeds,
    base_seed: BaseSeed = BENCH.base_seed,
    out: BenchOut = Path(BENCH.out),
    compare: Compare = BENCH.compare,
    audit_samples: BenchAuditSamples = BENCH.audit_samples,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    redo: Redo = BENCH.redo,
    quiet: Quiet = False,
    objective: BenchObjectives = "kl",
    overwrite: Replace = False,
    *,
    req: TrainRequest,
    audit: AuditSettings,
    lm: LMSettings,
):
    """Train every head with every seed, audit each, and print the paper's comparison tables (--task lm: the LAYA
    head and the tuned lens of a causal language model, per layer, over seeds)."""
    from ..runtime.errors import LayaError
    from ..runtime.fileio import check_new_outputs
    from ..training import bench as B
    from .train import refuse_unread

    req.train.seed = req.data.seed = base_seed
    req.train.device = pick_device(req.train.device)
    if lm.validate().is_lm:
        if heads != HEADS:
            raise LayaError("--heads: a language model's bench trains the LAYA head and the tuned lens together")
        lm_bench = (objective, seeds, base_seed, out, compare, audit_samples)
        check_new_outputs({"--json": json_out, "--markdown": markdown}, overwrite)
        return bench_language_model(req, lm, lm_bench, audit, redo, quiet, (json_out, markdown))
    if objective != "kl" or req.train.layer_dropout:
        raise LayaError("--objective, --block-size, --eval-tokens and --layer-dropout apply to --task lm")
    refuse_device_map(lm.device_map)
    refuse_unread(lm, Use(LMSettings, skip=BENCH_LM_SKIP), ("task",), "applies to --task lm")
    with progress.enabled(not quiet):
        check_new_outputs({"--json": json_out, "--markdown": markdown}, overwrite)
        bench_req = B.BenchRequest(
            train=req.validate(),
            audit=audit.validate(),
            heads=B.parse_heads(heads),
            seeds=seeds,
            base_seed=base_seed,
            out=str(out),
            compare=compare,
            audit_samples=audit_samples,
            redo=redo,
            align=align,
        ).validate()
        result = B.run_bench(bench_req, None if quiet else print_run)
    render(result, bench_req, quiet, json_out, markdown)
    log_bench_run(f"{req.data.name}-{req.backbone}", result, [json_out, markdown])


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


def bench_language_model(req, lm, lm_bench: tuple, audit, redo: bool, quiet: bool, files) -> None:
    """``--task lm``: every (objective, seed) run trained and audited (training/bench_lm.py); the tables, the JSON
    and the Markdown asked for."""
    from ..report.lm import lm_bench_markdown, lm_bench_tables
    from ..runtime.fileio import strict_json
    from ..training.bench_lm import LMBenchRequest, run_lm_bench
    from .train import lm_request

    objective, seeds, base_seed, out, compare, audit_samples = lm_bench
    req = LMBenchRequest(
        train=lm_request(req, lm),
        objectives=objective.split(","),
        seeds=seeds,
        base_seed=base_seed,
        out=str(out),
        compare=LM_COMPARE if compare == BENCH.compare else compare,
        audit=audit,
        audit_samples=audit_samples,
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
