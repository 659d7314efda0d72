"""The ``laya`` command line: parse options, call the library, render. No maths here.

Options are declared once in ``options.py``; every table is built in ``report.py``. Nothing
heavy is imported at module level (no torch), so ``laya --help`` starts fast; each command
imports what it needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from ..runtime import progress
from ..runtime.distributed import env_world_size
from ..runtime.errors import LayaError, TrainingInterrupted
from ..runtime.progress import LazyConsole
from .options import (  # CI gates (docs/ci.md)
    AUDIT,
    BENCH,
    DATA,
    DEPTH,
    HEAD,
    JOB,
    SCOPE,
    TRAIN,
    Ablation,
    Align,
    AllowSettingsChange,
    Arch,
    ArchImport,
    AuditBatchSize,
    AuditIn,
    AuditQuiet,
    Backbone,
    Baseline,
    BatchSize,
    BenchAlign,
    ByClass,
    Cache,
    Compare,
    DataDir,
    Dataset,
    DepthBatchSize,
    DepthIn,
    DepthSeed,
    Device,
    DStar,
    Epochs,
    EvalDataset,
    FailUnder,
    FeatureDtype,
    Finetune,
    Head,
    ImageColumn,
    ImageSize,
    InputSize,
    InternalBatchSize,
    JsonOut,
    JunitOut,
    Label,
    LabelColumn,
    Layers,
    Lr,
    MarkdownOut,
    MaxDrop,
    MetricColumns,
    ModelPath,
    Patience,
    PlotOut,
    Pool,
    Pretrained,
    Psi,
    Quiet,
    RandomisationSamples,
    Reduce,
    Refit,
    RefitEpochs,
    Restart,
    Resume,
    Samples,
    SampleSeed,
    Scope,
    ScoreHidden,
    Seed,
    Steps,
    Strict,
    Target,
    Tau,
    Thresholds,
    TimeBatch,
    TimeRepeats,
    Truncate,
    TruncateOut,
    TrustPickle,
    Weights,
    train_request,
)

console = LazyConsole()  # rich is imported on first print, not by `laya --help`
err_console = LazyConsole(stderr=True)


def _under_torchrun() -> bool:
    return env_world_size() > 1


def _usage_errors() -> tuple:
    """Usage errors click reports itself, with exit 2 (never an internal error): those of the click that
    recent typer vendors (typer.TyperException) and, when it is loaded, of click itself (older typer)."""
    errors = [typer.Abort, *((typer.TyperException,) if hasattr(typer, "TyperException") else ())]
    click = sys.modules.get("click")
    if click is not None:
        errors += [click.exceptions.ClickException, click.exceptions.Abort]
    return tuple(errors)


# The exit-code contract (docs/usage.md#exit-codes): what a CI job can rely on.
EXIT_OK, EXIT_GATE_FAILED, EXIT_USER_ERROR, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class LayaGroup(TyperGroup):
    """Maps every way a command can end to the exit-code contract, from one place:

    0 done; 1 a ``--fail-under`` gate missed (the command raises ``typer.Exit(1)`` itself); 2 a user
    error (``LayaError``, or a usage error click reports): one line on stderr, never a traceback;
    3 an internal error (any other exception): the traceback on stderr, then one line saying it is
    a bug in laya and where to report it; 130 interrupted (Ctrl-C, SIGTERM during training).

    Also where a command starts: ``LAYA_OFFLINE`` is applied (``offline_from_env``), and under
    torchrun the command joins the process group (docs/scaling.md); ranks other than 0 are muted
    (no tables, bars, status lines or warnings; crashes still print a traceback).
    """

    def get_help_option(self, ctx):
        # The group's own --help flag, when not given, is None; recent typer then builds a pydantic
        # validator for it, importing pydantic (~0.15 s) on every `laya <cmd> --help`. False is the
        # same answer ("not given") without that.
        option = super().get_help_option(ctx)
        if option is not None and getattr(option, "default", False) is None:
            option.default = False
        return option

    def invoke(self, ctx):
        offline_from_env()
        if not _under_torchrun():  # the common case: nothing to join, no torch to import
            return self._run(ctx)
        from ..runtime import distributed

        try:
            distributed.init_from_env()
            with contextlib.ExitStack() as muted:
                if not distributed.is_main():
                    muted.enter_context(_muted())
                return self._run(ctx)
        finally:
            distributed.mark_done()
            distributed.cleanup()

    def _run(self, ctx):
        try:
            return super().invoke(ctx)
        except LayaError as e:
            _report_user_error(e)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except typer.Exit as e:  # also click's Exit: typer.Exit is click's, or what typer raises instead
            if getattr(e, "exit_code", 0) and _under_torchrun():
                from ..runtime import distributed

                distributed.wait_for_main()  # e.g. --fail-under: rank 0 may still be writing its outputs
            raise
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except TrainingInterrupted as e:
            err_console.print(f"[bold red]interrupted:[/] {_escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as e:
            if isinstance(e, _usage_errors()):
                raise  # usage errors of a subcommand's options: click prints them (exit 2)
            _report_internal_error()
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None


def _report_internal_error() -> None:
    """An exception laya did not anticipate: keep the whole traceback, then say it is our bug, not the user's."""
    import traceback

    from .. import __version__

    traceback.print_exc(file=sys.stderr)
    sys.stderr.write(
        f"internal error (exit {EXIT_INTERNAL_ERROR}): this is a bug in laya {__version__}, not a "
        f"problem with your input; please report it with the command and the traceback above "
        f"to {issue_tracker()}\n"
    )
    sys.stderr.flush()


def issue_tracker() -> str:
    """Where bugs are reported: the ``Issues`` (or ``Bug Tracker``) URL of the installed distribution's
    metadata (pyproject's ``[project.urls]``), else the maintainers named in docs/usage.md."""
    from importlib import metadata

    try:
        for entry in metadata.metadata("laya-audit").get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() in ("issues", "bug tracker", "bugs", "tracker"):
                return url.strip()
    except metadata.PackageNotFoundError:
        pass
    return "the laya maintainers (see docs/usage.md#exit-codes)"


def offline_from_env() -> None:
    """``LAYA_OFFLINE=1`` means no download at all: also put the Hugging Face hub (timm's pretrained
    weights) in offline mode, so a missing weight fails at once instead of after the hub's retries.
    Set before anything imports huggingface_hub, which reads it when first imported."""
    from ..runtime.config import offline

    if offline():
        os.environ["HF_HUB_OFFLINE"] = "1"


def _report_user_error(e: LayaError) -> None:
    """Print ``error: …`` once. Under torchrun rank 0 prints, unless another rank failed on its own."""
    if not _under_torchrun():
        err_console.print(f"[bold red]error:[/] {_escape(str(e))}", highlight=False, soft_wrap=True)
        return
    from ..runtime import distributed

    own = distributed.should_report_error(str(e)) and not distributed.is_main()
    if distributed.is_main():
        err_console.print(f"[bold red]error:[/] {_escape(str(e))}", highlight=False, soft_wrap=True)
    elif own:
        sys.stderr.write(f"error (rank {distributed.rank()}): {e}\n")
    if not own:
        distributed.wait_for_main()  # torchrun stops every rank once one fails: let rank 0 finish


@contextlib.contextmanager
def _muted():
    """Only rank 0 prints: silence the rich consoles, stdout and warnings, restoring all of them after."""
    import warnings

    consoles = (console, err_console, progress.console)
    before = [c.quiet for c in consoles]
    for c in consoles:
        c.quiet = True
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for c, q in zip(consoles, before):
            c.quiet = q
        sys.stdout.close()
        sys.stdout = stdout


app = typer.Typer(
    cls=LayaGroup,
    help="Layer-attribution auditing with LAYA heads: train, audit, export.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain click help: typer's rich help imports markdown/pygments (~0.2 s per start)
)


def _device(device: str) -> str:
    from ..runtime.device import resolve_device

    return resolve_device(device)


def _escape(text: str) -> str:
    """Rich markup in a message (a path with [brackets]) is printed as written, not interpreted."""
    from rich.markup import escape

    return escape(text)


def _trust_arch(arch: str | None) -> None:
    """--arch on audit/export: the user names the code a checkpoint trained with --arch imports."""
    if arch:
        from ..backbones.build import trust_code

        trust_code(arch)


def _note(text: str) -> None:
    """A note of the library on stderr; one that starts with 'warning: ' is shown as a warning."""
    label, rest = (
        ("[bold yellow]warning:[/]", text[len("warning: ") :])
        if text.startswith("warning: ")
        else ("[yellow]note:[/]", text)
    )
    err_console.print(f"{label} {rest}", highlight=False, soft_wrap=True)


def _wide(renderables):
    """The console for wide tables: a log or a pipe has no width, so print them whole, not cut to 80 columns."""
    if console.is_terminal:
        return console
    from rich.console import Console

    unbounded = console.options.update_width(10_000)  # measured against 80 columns, a table never looks wider
    return Console(width=max([console.width, *(console.measure(t, options=unbounded).maximum for t in renderables)]))


# --------------------------------------------------------------------------- train


@app.command()
def train(
    backbone: Backbone = JOB.backbone,
    dataset: Dataset = DATA.name,
    head: Head = JOB.head,
    out: Annotated[Path, typer.Option(help="Where to write the checkpoint.")] = Path(JOB.out),
    data_dir: DataDir = DATA.data_dir,
    label: Label = DATA.label,
    image_size: ImageSize = DATA.image_size,
    strict: Strict = DATA.strict,
    image_column: ImageColumn = DATA.image_column,
    label_column: LabelColumn = DATA.label_column,
    d_star: DStar = HEAD.d_star,
    tau: Tau = HEAD.tau,
    psi: Psi = HEAD.psi,
    score_hidden: ScoreHidden = HEAD.score_hidden,
    epochs: Epochs = TRAIN.epochs,
    batch_size: BatchSize = TRAIN.batch_size,
    lr: Lr = TRAIN.lr,
    patience: Patience = TRAIN.patience,
    align: Align = TRAIN.align,
    seed: Seed = TRAIN.seed,
    layers: Layers = None,
    pool: Pool = JOB.pool,
    pretrained: Pretrained = JOB.pretrained,
    weights: Weights = None,
    arch: Arch = JOB.arch,
    input_size: InputSize = JOB.input_size,
    finetune: Finetune = JOB.finetune,
    trust_pickle: TrustPickle = JOB.trust_pickle,
    feature_dtype: FeatureDtype = JOB.feature_dtype,
    cache: Cache = JOB.use_cache,
    resume: Resume = JOB.resume,
    restart: Restart = JOB.restart,
    device: Device = "auto",
    quiet: Quiet = False,
):
    """Train a head (LAYA or a baseline) on a backbone and write a checkpoint."""
    from ..training.loop import train as run_training

    with progress.enabled(not quiet):
        req = train_request(
            backbone=backbone,
            dataset=dataset,
            head=head,
            out=out,
            data_dir=data_dir,
            label=label,
            image_size=image_size,
            strict=strict,
            image_column=image_column,
            label_column=label_column,
            feature_dtype=feature_dtype,
            d_star=d_star,
            tau=tau,
            psi=psi,
            score_hidden=score_hidden,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            patience=patience,
            seed=seed,
            layers=layers,
            pool=pool,
            pretrained=pretrained,
            weights=weights,
            finetune=finetune,
            trust_pickle=trust_pickle,
            cache=cache,
            resume=resume,
            restart=restart,
            device=_device(device),
            arch=arch,
            input_size=input_size,
            align=align,
        )
        if trust_pickle:
            err_console.print("[bold yellow]warning:[/] --trust-pickle lets the weights file run code on this machine")

        def on_epoch(r):
            if not quiet:
                mark = " [green]*best[/]" if r.best else ""
                console.print(
                    f"epoch {r.epoch:3d}  loss {r.loss:.4f}  train acc {r.train_accuracy:.4f}  "
                    f"val acc {r.val_accuracy:.4f}  {r.seconds:.1f}s{mark}",
                    highlight=False,
                )

        ckpt = run_training(req, on_epoch)
    m = ckpt["metrics"]
    console.print(
        f"[bold]test accuracy {m['test_accuracy']:.4f}  macro-F1 {m['test_macro_f1']:.4f}[/]  "
        f"(best epoch {m['best_epoch']} of {m['epochs_run']}) -> {out}",
        highlight=False,
    )


# --------------------------------------------------------------------------- audit


@app.command()
def audit(
    model: ModelPath,
    compare: Compare = "ig,gradxact",
    samples: Samples = None,
    seed: SampleSeed = AUDIT.seed,
    dataset: EvalDataset = None,
    data_dir: DataDir = None,
    ablation: Ablation = AUDIT.ablation,
    target: Target = AUDIT.target,
    reduce: Reduce = AUDIT.reduce,
    steps: Steps = AUDIT.steps,
    internal_batch_size: InternalBatchSize = AUDIT.internal_batch_size,
    batch_size: AuditBatchSize = AUDIT.batch_size,
    by_class: ByClass = AUDIT.by_class,
    scope: Scope = SCOPE.scope,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    fail_under: FailUnder = None,
    metrics: MetricColumns = "",
    randomisation_samples: RandomisationSamples = AUDIT.randomisation_samples,
    cache: Cache = True,
    device: Device = "auto",
    quiet: AuditQuiet = False,
    baseline: Baseline = None,
    max_drop: MaxDrop = None,
    allow_settings_change: AllowSettingsChange = False,
    junit: JunitOut = None,
    arch: ArchImport = None,
):
    """Audit how faithfully layer attributions (LAYA's own α, Captum's) explain each prediction."""
    import time

    from ..auditing import names as audit_names
    from ..auditing import run as auditing
    from ..auditing.metrics import check_ablation
    from ..gates import regression
    from ..gates import thresholds as gate_thresholds
    from ..gates.checks import verdict as gate_verdict
    from ..gates.junit import junit_xml
    from ..model.evaldata import load_eval_data
    from ..model.laya_model import load_model
    from ..report.audit import audit_class_tables, audit_deeper_table, audit_markdown, audit_rich_table, verdict_line
    from ..report.network import (
        HEAD_TITLE,
        NETWORK_TITLE,
        network_caption,
        network_comparison,
        network_markdown,
        scope_tables,
    )
    from ..runtime import distributed
    from ..runtime.config import AuditSettings, ScopeSettings, check_at_least
    from ..runtime.fileio import append_text, atomic_write_text, check_writable, strict_json

    started = time.perf_counter()
    with progress.enabled(not quiet):
        _trust_arch(arch)
        check_at_least("--samples", samples)
        settings = AuditSettings(
            ablation=ablation,
            target=target,
            reduce=reduce,
            steps=steps,
            internal_batch_size=internal_batch_size,
            batch_size=batch_size,
            seed=seed,
            by_class=by_class,
            device=_device(device),
            randomisation_samples=randomisation_samples,
        ).validate()
        scope = ScopeSettings(scope).validate().scope
        methods = audit_names.parse_methods(compare)
        thresholds = gate_thresholds.parse_thresholds(fail_under, methods, scope)
        columns = audit_names.parse_metric_groups(metrics)
        drops = regression.parse_max_drop(max_drop, methods, scope)
        if drops and baseline is None:
            raise LayaError("--max-drop needs --baseline FILE (the JSON of a previous laya audit --json)")
        base_doc = regression.read_audit_json(baseline) if baseline is not None else None
        for path in (json_out, markdown, junit):
            if path is not None:
                check_writable(path)
        laya_model = load_model(model)
        check_ablation(laya_model.head, settings.ablation)  # before any feature extraction
        if base_doc is not None:  # what is known before the run: a mismatch fails now, not after the work
            regression.check_settings(
                base_doc,
                regression.planned_audit(settings, methods, samples, laya_model),
                allow_settings_change,
                baseline,
            )
        if scope != "head":
            from ..auditing.network import check_network_scope, run_scoped_audit

            check_network_scope(laya_model, settings.ablation)  # taps that cannot be patched: before any work
        data = load_eval_data(
            laya_model, dataset, data_dir, samples, seed, settings.device, use_cache=cache, stream=True
        )
        if scope == "head":
            result = auditing.run_audit(laya_model, data, methods, settings)
        else:
            result = run_scoped_audit(laya_model, data, methods, settings, scope, use_cache=cache)
    result.settings.update(
        {"model": str(model), "samples": samples, "data_dir": data_dir, "fail_under": [str(t) for t in thresholds]}
    )
    doc = result.to_dict()
    comparison = regression.gate(base_doc, doc, drops, allow_settings_change, baseline) if base_doc else None
    checks = gate_thresholds.threshold_checks(result, thresholds) + (comparison.checks if comparison else [])
    verdict = gate_verdict(checks)
    misses = [c.message for c in checks if c.failed and c.gate == "fail-under"]
    drop_misses = [c.message for c in checks if c.failed and c.gate == "max-drop"]
    compared = comparison.to_dict() if comparison else None

    network = result.network  # --scope network|both (laya_cli/network.py); None: the head scope alone
    if not quiet:
        if result.methods:  # empty for --scope network
            table = (
                audit_rich_table(result, comparison=compared)
                if network is None
                else audit_rich_table(result, HEAD_TITLE, comparison=compared)
            )
            _wide([table]).print(table)
            if (deeper := audit_deeper_table(result, columns, comparison=compared)) is not None:
                _wide([deeper]).print(deeper)
        for table in audit_class_tables(result):
            console.print(table)
        if network is not None:
            table = audit_rich_table(
                result,
                NETWORK_TITLE,
                network.methods,
                network_caption(result, compared),
                comparison=network_comparison(compared),
            )
            _wide([table]).print(table)
            for table in scope_tables(result):
                console.print(table)
        for note in result.notes + (network.notes if network is not None else []):
            _note(note)
    gate_shown = misses if thresholds else None
    markdown_text = (
        audit_markdown(
            result,
            gate_shown,
            HEAD_TITLE if network is not None else "laya audit",
            metrics=columns,
            comparison=compared,
            drop_misses=drop_misses if drops else None,
        )
        if result.methods
        else ""
    )
    if network is not None:  # --scope network: its section carries the gate's outcome
        alone = not result.methods
        markdown_text += ("\n" if markdown_text else "") + network_markdown(
            result, gate_shown if alone else None, compared, drop_misses if drops and alone else None
        )
    if distributed.is_main():  # under torchrun only rank 0 writes
        if json_out is not None:
            doc["fail_under"] = {"thresholds": [str(t) for t in thresholds], "misses": misses, "passed": not misses}
            if comparison:
                doc["baseline"] = compared
            doc["verdict"] = verdict.to_dict()
            atomic_write_text(json_out, strict_json(doc))
        if markdown is not None:
            atomic_write_text(markdown, markdown_text)
        if junit is not None:
            atomic_write_text(
                junit,
                junit_xml(
                    checks, properties=regression.junit_properties(doc, baseline), seconds=time.perf_counter() - started
                ),
            )
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:  # GitHub Actions: the job summary shows the table without any flag
            try:
                append_text(summary, markdown_text + "\n")
            except LayaError as e:
                err_console.print(
                    f"[bold yellow]warning:[/] $GITHUB_STEP_SUMMARY: {_escape(str(e))}", highlight=False, soft_wrap=True
                )
    if not quiet:
        for c in verdict.failures:
            err_console.print(f"[bold red]{c.gate}:[/] {_escape(c.message)}", highlight=False, soft_wrap=True)
        if thresholds and not misses:
            err_console.print(f"[green]fail-under: all {len(thresholds)} threshold(s) met[/]", highlight=False)
        if drops and not drop_misses:
            n = sum(c.gate == "max-drop" and not c.skipped for c in checks)
            err_console.print(
                f"[green]max-drop: no metric dropped more than allowed ({n} check(s))[/]", highlight=False
            )
    console.print(verdict_line(verdict, result.n_samples), highlight=False, soft_wrap=True, markup=False)
    if not verdict.passed:
        raise typer.Exit(EXIT_GATE_FAILED)


# --------------------------------------------------------------------------- depth


@app.command()
def depth(
    model: ModelPath,
    refit: Refit = DEPTH.refit,
    refit_epochs: RefitEpochs = None,
    thresholds: Thresholds = None,
    truncate: Truncate = None,
    out: TruncateOut = None,
    samples: Samples = None,
    seed: DepthSeed = DEPTH.seed,
    dataset: EvalDataset = None,
    data_dir: DataDir = None,
    batch_size: DepthBatchSize = DEPTH.batch_size,
    time_repeats: TimeRepeats = DEPTH.time_repeats,
    time_batch: TimeBatch = DEPTH.time_batch,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    plot: PlotOut = None,
    cache: Cache = True,
    device: Device = "auto",
    quiet: Quiet = False,
    arch: ArchImport = None,
):
    """How deep must the model be? Accuracy and compute when cut after each tap, early exit, a shallower model out."""
    from ..depthing import run as depthing
    from ..depthing.truncation import check_k, check_maskable
    from ..model.evaldata import load_eval_data, load_fit_features
    from ..model.laya_model import load_model
    from ..report.depth import depth_markdown, depth_rich_tables, truncate_line
    from ..runtime import distributed
    from ..runtime.config import EXIT_THRESHOLDS, DepthSettings, check_at_least
    from ..runtime.fileio import atomic_path, atomic_write_text, check_writable
    from .options import split_csv

    with progress.enabled(not quiet):
        _trust_arch(arch)
        check_at_least("--samples", samples)
        settings = DepthSettings(
            batch_size=batch_size,
            seed=seed,
            refit=refit,
            refit_epochs=refit_epochs,
            thresholds=tuple(split_csv(thresholds)) if thresholds is not None else EXIT_THRESHOLDS,
            time_repeats=time_repeats,
            time_batch=time_batch,
            truncate=truncate,
            device=_device(device),
        ).validate()
        if truncate is not None and out is None:
            raise LayaError("--truncate K writes a checkpoint: name it with --out small.pt")
        if out is not None and truncate is None:
            raise LayaError("--out names the checkpoint --truncate K writes; add --truncate K")
        for path in (json_out, markdown, plot, out):
            if path is not None:
                check_writable(path)
        laya_model = load_model(model)
        if truncate is not None:
            check_k(truncate, laya_model.num_layers)
        if not refit:
            check_maskable(laya_model.head)  # before any feature extraction
        data = load_eval_data(laya_model, dataset, data_dir, samples, seed, settings.device, use_cache=cache)
        fit_feats = load_fit_features(laya_model, settings.device, cache) if refit else None
        if truncate is not None:
            res = depthing.truncate_model(laya_model, data, settings, out, fit_feats)  # rank 0 writes
            console.print(truncate_line(res), highlight=False, soft_wrap=True, markup=False)
            return
        result = depthing.run_depth(laya_model, data, settings, fit_feats)
    result.settings.update({"model": str(model), "samples": samples, "data_dir": data_dir})
    doc = result.to_dict()
    tables = depth_rich_tables(doc)
    wide = _wide(tables)
    for table in tables:
        wide.print(table)
    for note in result.notes:
        _note(note)
    if not distributed.is_main():
        return
    if json_out is not None:
        atomic_write_text(json_out, result.to_json())
    if markdown is not None:
        atomic_write_text(markdown, depth_markdown(doc))
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        from ..report.figures import plot_depth

        with atomic_path(plot) as tmp:
            plot_depth(doc, tmp)


# --------------------------------------------------------------------------- export


@app.command("export")
def export_cmd(
    model: ModelPath,
    out: Annotated[
        Path,
        typer.Option("--out", metavar="DIR", help="Folder to write (created). A non-empty folder needs --overwrite."),
    ] = Path("export"),
    fmt: Annotated[
        str, typer.Option("--format", help="Per-sample table format: csv, parquet (needs pyarrow) or npz.")
    ] = "csv",
    plots: Annotated[
        bool, typer.Option("--plots/--no-plots", help="Draw the PNG figures (report.html is written either way).")
    ] = True,
    strip: Annotated[
        int, typer.Option("--strip", metavar="K", help="How many samples the image strip shows (0 = no strip).")
    ] = 8,
    dataset: EvalDataset = None,
    data_dir: DataDir = None,
    samples: Samples = None,
    seed: Annotated[int, typer.Option(help="Seed of the --samples subset.")] = 0,
    device: Device = "auto",
    overwrite: Annotated[
        bool, typer.Option(help="Replace --out if it holds a previous laya export (never any other folder).")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bars or tables; only errors and notes.")
    ] = False,
    arch: ArchImport = None,
    audit: AuditIn = None,
    depth: DepthIn = None,
):
    """Export per-sample layer attention as tables, PNG plots and one self-contained report.html."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display needed (figures.py draws without pyplot anyway)
    from ..exporting.run import run_export
    from ..report.export import shift_table

    with progress.enabled(not quiet):
        _trust_arch(arch)
        exp = run_export(
            model,
            out,
            fmt=fmt,
            plots=plots,
            strip=strip,
            dataset=dataset,
            data_dir=data_dir,
            samples=samples,
            seed=seed,
            device=_device(device),
            overwrite=overwrite,
            audit=audit,
            depth=depth,
        )
    for note in exp.notes:
        _note(note)
    if quiet:
        return
    if exp.has_alpha:
        g = exp.global_profile
        a = g[(g["quantity"] == "alpha") & (g["subset"] == "all")]
        console.print(
            "mean α per layer:  " + "  ".join(f"{name} {m:.3f}" for name, m in zip(a["layer"], a["mean"])),
            highlight=False,
        )
        console.print(shift_table(exp))
    console.print(
        f"[bold]exported {exp.n:,} samples[/] (accuracy {exp.accuracy:.4f}, {len(exp.files)} files) "
        f"-> {exp.out}/   report: {exp.out / 'report.html'}",
        highlight=False,
    )


# --------------------------------------------------------------------------- bench

bench_app = typer.Typer(
    help="Compare heads over seeds (accuracy, faithfulness, Deletion@1); 'laya bench speed' runs the speed benchmarks.",
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(bench_app, name="bench")


@bench_app.callback()
def bench(
    ctx: typer.Context,
    dataset: Dataset = DATA.name,
    backbone: Backbone = JOB.backbone,
    heads: Annotated[
        str,
        typer.Option(
            help="Comma list of heads to compare: last, concat, scalarmix, laya, laya-aligned (laya trained "
            "with --align)."
        ),
    ] = ",".join(BENCH.heads),
    align: BenchAlign = BENCH.align,
    seeds: Annotated[
        int, typer.Option(help="Runs per head; run k uses seed --base-seed + k (init, shuffling, validation split).")
    ] = BENCH.seeds,
    base_seed: Annotated[int, typer.Option(help="Seed of the first run (1337: the paper config).")] = BENCH.base_seed,
    out: Annotated[
        Path, typer.Option(help="Output folder; runs go to OUT/<dataset>-<backbone>/ and finished ones are reused.")
    ] = Path(BENCH.out),
    data_dir: DataDir = DATA.data_dir,
    label: Label = DATA.label,
    image_size: ImageSize = DATA.image_size,
    strict: Strict = DATA.strict,
    image_column: ImageColumn = DATA.image_column,
    label_column: LabelColumn = DATA.label_column,
    d_star: DStar = HEAD.d_star,
    tau: Tau = HEAD.tau,
    psi: Psi = HEAD.psi,
    score_hidden: ScoreHidden = HEAD.score_hidden,
    epochs: Epochs = TRAIN.epochs,
    batch_size: BatchSize = TRAIN.batch_size,
    lr: Lr = TRAIN.lr,
    patience: Patience = TRAIN.patience,
    layers: Layers = None,
    pool: Pool = JOB.pool,
    pretrained: Pretrained = JOB.pretrained,
    weights: Weights = None,
    finetune: Finetune = JOB.finetune,
    trust_pickle: TrustPickle = JOB.trust_pickle,
    feature_dtype: FeatureDtype = JOB.feature_dtype,
    compare: Compare = BENCH.compare,
    audit_samples: Annotated[
        int,
        typer.Option(
            help="Audit this many test samples (the same seeded subset for every run; more than the test split = all)."
        ),
    ] = BENCH.audit_samples,
    audit_seed: Annotated[int, typer.Option(help="Seed of the audited subset and of the random method.")] = AUDIT.seed,
    ablation: Ablation = AUDIT.ablation,
    target: Target = AUDIT.target,
    reduce: Reduce = AUDIT.reduce,
    steps: Steps = AUDIT.steps,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    redo: Annotated[bool, typer.Option(help="Retrain and re-audit every run, even finished ones.")] = BENCH.redo,
    cache: Cache = JOB.use_cache,
    device: Device = "auto",
    quiet: Quiet = False,
):
    """Train every head with every seed, audit each, and print the paper's comparison tables."""
    if ctx.invoked_subcommand is not None:
        given = [
            p.opts[0]
            for p in ctx.command.params
            if getattr(ctx.get_parameter_source(p.name), "name", "DEFAULT") != "DEFAULT"
        ]
        if given:
            raise LayaError(
                f"{', '.join(given)} belong to 'laya bench', not to 'laya bench {ctx.invoked_subcommand}'; "
                f"see laya bench {ctx.invoked_subcommand} --help"
            )
        return
    from ..report.bench import bench_caption, bench_counts, bench_markdown, bench_rich_tables
    from ..runtime.config import AuditSettings
    from ..runtime.fileio import atomic_write_text, check_writable
    from ..training import bench as B

    with progress.enabled(not quiet):
        for path in (json_out, markdown):
            if path is not None:
                check_writable(path)
        template = train_request(
            backbone=backbone,
            dataset=dataset,
            head="laya",
            out="model.pt",
            data_dir=data_dir,
            label=label,
            image_size=image_size,
            strict=strict,
            image_column=image_column,
            label_column=label_column,
            feature_dtype=feature_dtype,
            d_star=d_star,
            tau=tau,
            psi=psi,
            score_hidden=score_hidden,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            patience=patience,
            seed=base_seed,
            layers=layers,
            pool=pool,
            pretrained=pretrained,
            weights=weights,
            finetune=finetune,
            trust_pickle=trust_pickle,
            cache=cache,
            resume=False,
            device=_device(device),
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

        def on_run(o, i, n):
            if quiet:
                return
            m = o.record["metrics"]
            what = "reused" if not o.trained and not o.audited else ("re-audited" if not o.trained else "trained")
            console.print(
                f"[{i}/{n}] {o.head:<9} seed {o.seed}  test acc {m['test_accuracy']:.4f}  macro-F1 "
                f"{m['test_macro_f1']:.4f}  ({what})",
                highlight=False,
            )

        result = B.run_bench(req, on_run)
    tables = bench_rich_tables(result)
    wide = _wide(tables)
    for table in tables:
        wide.print(table)
    wide.print(bench_caption(result), style="dim", highlight=False)
    if not quiet:
        console.print(f"{bench_counts(result)} in {result.wall_seconds:.0f} s -> {req.folder}", highlight=False)
    if json_out is not None:
        atomic_write_text(json_out, result.to_json())
    if markdown is not None:
        atomic_write_text(markdown, bench_markdown(result))


@bench_app.command("speed")
def bench_speed(
    quick: Annotated[
        bool,
        typer.Option("--quick", help="Tiny sizes, one shared process (a smoke run under ~30 s, not a measurement)."),
    ] = False,
    device: Device = "auto",
    json_out: JsonOut = None,
):
    """Run every speed benchmark (each in a fresh process) and print all ratios and peak memory side by side."""
    from .. import speed
    from ..report.speed import speed_tables
    from ..runtime.fileio import atomic_write_text, check_writable, strict_json

    if json_out is not None:
        check_writable(json_out)
    # --device cpu needs no torch in this process (the benchmarks import it in their own processes).
    dev = "cpu" if device.strip().lower() == "cpu" else _device(device)
    summary = speed.run_all(quick=quick, device=dev)  # Ctrl-C: the child stops, "interrupted" (130)
    from rich.console import Console

    (console if console.is_terminal else Console(width=110)).print(speed_tables(summary))
    if json_out is not None:
        atomic_write_text(json_out, strict_json(summary))


# --------------------------------------------------------------------------- info


@app.command()
def info(
    model: ModelPath,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a panel.")] = False,
):
    """Show what a checkpoint holds: backbone, layers, head, classes and test metrics."""
    from ..model.checkpoint import checkpoint_summary, read_checkpoint
    from ..report.info import info_panel

    summary = checkpoint_summary(read_checkpoint(model))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    console.print(info_panel(summary, model))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
