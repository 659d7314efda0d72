"""``laya bench``: train every head with every seed, audit each and compare (the job:
the task's bench, ``exporting.tasks.bench``). The speed benchmarks are the checkout's ``python -m benchmarks``.

The bench's own options are ``BenchSettings``'s declared settings (heads, seeds, the output folder); the backbone,
data and head options ``TrainJobSettings``'s (those a bench varies or fixes are left out); the audit's five
``AuditSettings``'."""

from __future__ import annotations

from ..auditing.settings import AuditSettings
from ..runtime import progress
from ..training.bench import BenchSettings
from ..training.settings import TrainJobSettings
from .common import console, print_tables, write_outputs
from .declared import Use, with_settings
from .options import JsonOut, MarkdownOut, Quiet, Replace

# What a bench fixes or varies itself (each run's head, seed, objective, lens and checkpoint) and the training
# options it does not offer (a bench compares the heads under the paper's training; --align is the laya-aligned
# head's λ, a setting of the bench).
BENCH_FIXES = (
    "head out resume restart arch input_size seed align align_scope stop_on precision layer_norm alpha_entropy "
    "alpha_entropy_schedule tau_start objective lens".split()
)
AUDITED = Use(
    AuditSettings,
    only=("ablation", "target", "reduce", "steps", "seed"),
    rename={"seed": "audit_seed"},
    helps={"seed": "Seed of the audited subset and of the random method."},
)


@with_settings(
    bench=Use(BenchSettings, skip=("train", "audit")), req=Use(TrainJobSettings, skip=BENCH_FIXES), audit=AUDITED
)
def bench(
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    quiet: Quiet = False,
    overwrite: Replace = False,
    *,
    bench: BenchSettings,
    req: TrainJobSettings,
    audit: AuditSettings,
):
    """Train every head with every seed, audit each, and print the paper's comparison tables (--task lm: the LAYA
    head and the tuned lens of a causal language model, per layer, over seeds)."""
    from ..exporting.tasks import bench as run_bench
    from ..exporting.tasks import task_for
    from ..runtime.declare import check_fields, evolve
    from ..runtime.device import resolved
    from ..runtime.fileio import check_new_outputs

    check_fields(bench)  # --base-seed's bounds, named as such, before it becomes each run's --seed
    # the bench's base seed is each run's seed and its split's; the device picked: a new request
    train = resolved(req.train, seed=bench.base_seed)
    req = evolve(req, train=train, data=evolve(req.data, seed=bench.base_seed))
    bench = evolve(bench, train=req, audit=audit)
    with progress.enabled(not quiet):
        bench.validate()
        check_new_outputs({"--json": json_out, "--markdown": markdown}, overwrite)
        run_line, render_bench = SHOWN[task_for(req).name]  # the bench's task, chosen once
        result = run_bench(bench, None if quiet else run_line)
    render_bench(result, bench, quiet, (json_out, markdown))


def render_classifiers(result, bench: BenchSettings, quiet: bool, files) -> None:
    """A classifiers' bench: its tables and files, and the tracker's run."""
    render(result, bench, quiet, *files)
    log_bench_run(f"{bench.train.data.name}-{bench.train.backbone}", result, list(files))


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

    write_outputs(json_out, result.to_json, markdown, lambda: bench_markdown(result))  # first: a full disk's one line
    wide = print_tables(bench_rich_tables(result))
    wide.print(bench_caption(result), style="dim", highlight=False, markup=False)
    if not quiet:
        line = f"{bench_counts(result)} in {result.wall_seconds:.0f} s -> {req.folder}"
        console.print(line, highlight=False, markup=False)


def log_bench_run(name: str, result, files) -> None:
    """``--log-to``: the comparison as one tracker run (``LayaCommand`` ends it)."""
    from ..runtime.tracking.events import log_bench
    from .command import current_run

    log_bench(current_run().track(f"bench {name}"), result.to_dict(), files)


def render_lm(doc: dict, bench: BenchSettings, quiet: bool, files) -> None:
    """A language model's bench: its tables, the JSON and the Markdown asked for."""
    from ..report.lm import lm_bench_markdown, lm_bench_tables
    from ..runtime.fileio import strict_json

    write_outputs(files[0], lambda: strict_json(doc), files[1], lambda: lm_bench_markdown(doc))  # first: see render
    print_tables(lm_bench_tables(doc))
    if not quiet:
        line = f"{len(doc['runs'])} runs in {doc['wall_seconds']:.0f} s -> {doc['bench']['folder']}"
        console.print(line, markup=False)


def print_lm_run(rec: dict, i: int, n: int) -> None:
    laya = rec["metrics"]["heads"]["laya"]
    what = "trained" if rec["trained"] else "reused"
    console.print(
        f"[{i}/{n}] objective {rec['objective']} seed {rec['seed']}  laya KL {laya['kl']:.4f} CE {laya['ce']:.4f} "
        f"bits/token  ({what})",
        highlight=False,
    )


# What each task's bench shows: a line per finished run, then its tables and files.
SHOWN = {"classify": (print_run, render_classifiers), "lm": (print_lm_run, render_lm)}
