"""The ``laya`` command line: parse options, call the library, render. No maths here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import click
import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from typer.core import TyperGroup

from . import distributed, progress
from .errors import LayaError, TrainingInterrupted

console = Console()
err_console = Console(stderr=True)


class LayaGroup(TyperGroup):
    """Turns user mistakes into one line on stderr and exit code 2, never a traceback.

    Also where a command joins torchrun's process group (docs/scaling.md): ranks other than 0
    are muted (no tables, bars, status lines or warnings; crashes still print a traceback).
    """

    def invoke(self, ctx: click.Context):
        restore = None
        try:
            distributed.init_from_env()
            restore = _mute_other_ranks() if not distributed.is_main() else None
            return super().invoke(ctx)
        except LayaError as e:
            # Under torchrun: printed once by rank 0, unless another rank failed on its own.
            own = distributed.should_report_error(str(e)) and not distributed.is_main()
            if distributed.is_main():
                err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            elif own:
                sys.stderr.write(f"error (rank {distributed.rank()}): {e}\n")
            if not own:
                distributed.wait_for_main()  # torchrun stops every rank once one fails: let rank 0 finish
            raise typer.Exit(2) from None
        except (typer.Exit, click.exceptions.Exit) as e:
            if getattr(e, "exit_code", 0):
                distributed.wait_for_main()  # e.g. --fail-under: rank 0 may still be writing its outputs
            raise
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            raise typer.Exit(130) from None
        except TrainingInterrupted as e:
            err_console.print(f"[bold red]interrupted:[/] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None
        finally:
            distributed.mark_done()
            if restore is not None:
                restore()
            distributed.cleanup()


def _mute_other_ranks():
    """Only rank 0 prints: silence the rich consoles, stdout and warnings; returns an undo."""
    import os
    import warnings

    consoles = (console, err_console, progress.console)
    before = [c.quiet for c in consoles]
    for c in consoles:
        c.quiet = True
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
    warnings.simplefilter("ignore")

    def restore():
        for c, q in zip(consoles, before):
            c.quiet = q
        sys.stdout.close()
        sys.stdout = stdout

    return restore


app = typer.Typer(
    cls=LayaGroup,
    help="Layer-attribution auditing with LAYA heads: train, audit, export.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _split_csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def resolve_device(device: str) -> str:
    """auto (CUDA if available, else CPU), cpu, cuda or mps; under torchrun cuda is this rank's GPU."""
    import torch

    if device not in ("auto", "cpu", "cuda", "mps"):
        raise LayaError(f"--device must be auto, cpu, cuda or mps, got '{device}'")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise LayaError("--device cuda asked for, but no CUDA device is available")
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise LayaError("--device mps asked for, but Apple's MPS backend is not available on this machine")
        if distributed.active():
            raise LayaError("--device mps cannot run under torchrun (no MPS process-group backend); use --device cpu")
    if device == "cuda" and distributed.active():
        return f"cuda:{torch.cuda.current_device()}"  # init_from_env pinned this rank to GPU LOCAL_RANK
    return device


# Options that `train` and `bench` share, declared once.
DataDirOpt = Annotated[Optional[str], typer.Option(help="Where the dataset lives (see docs/datasets.md).")]
LabelOpt = Annotated[str, typer.Option(help="artworks only: genre or artist.")]
ImageSizeOpt = Annotated[Optional[int], typer.Option(help="Side of file-based images (default: the backbone's input).")]
DStarOpt = Annotated[int, typer.Option("--d-star", help="Adapter width d*.")]
TauOpt = Annotated[float, typer.Option(help="Softmax temperature of the attention (fixed).")]
PsiOpt = Annotated[str, typer.Option(help="Shared transform ψ before scoring: identity or mlp.")]
ScoreHiddenOpt = Annotated[int, typer.Option(help="Hidden width of the scoring MLP.")]
LrOpt = Annotated[float, typer.Option(help="Adam learning rate.")]
PatienceOpt = Annotated[int, typer.Option(help="Early-stopping patience on validation accuracy.")]
LayersOpt = Annotated[Optional[str], typer.Option(help="Comma-separated glob patterns over module names to tap ('*' = one name part, '**' = any).")]
PoolOpt = Annotated[str, typer.Option(help="Token pooling for B×N×D layers: auto, cls or mean.")]
PretrainedOpt = Annotated[Optional[bool], typer.Option("--pretrained/--no-pretrained", help="Load the timm/torchvision pretrained weights (default for frozen hub backbones; needs network or a local hub cache).")]
WeightsOpt = Annotated[Optional[Path], typer.Option(help="A state-dict file (.pt/.pth/.bin/.safetensors) for --backbone timm:NAME|torchvision:NAME or --arch.")]
# --- zoo (issue 11): the user's own architecture, and the side the backbone sees
ArchOpt = Annotated[Optional[str], typer.Option(help="Your own architecture: module.path:callable or path/to/file.py:callable (imported: trusted code, see docs/backbones.md); its weights come from --weights.")]
InputSizeOpt = Annotated[Optional[int], typer.Option(help="Side of the images the backbone sees (default: its own input size; mlp/cnn: the data's).")]
FinetuneOpt = Annotated[Optional[bool], typer.Option("--finetune/--frozen", help="Train the backbone too (default for mlp/cnn) or keep it frozen and cache features.")]
CacheOpt = Annotated[bool, typer.Option(help="Use the on-disk feature cache for frozen backbones.")]


@app.command()
def train(
    backbone: Annotated[str, typer.Option(help="mlp, cnn, vit_base, timm:NAME or torchvision:NAME.")] = "mlp",
    dataset: Annotated[str, typer.Option(help="digits, fashion-mnist, cifar10, artworks or folder:PATH.")] = "digits",
    head: Annotated[str, typer.Option(help="laya, last, concat or scalarmix.")] = "laya",
    out: Annotated[Path, typer.Option(help="Where to write the checkpoint.")] = Path("model.pt"),
    data_dir: DataDirOpt = None,
    label: LabelOpt = "genre",
    image_size: ImageSizeOpt = None,
    strict: Annotated[bool, typer.Option(help="Fail on an undecodable image in a folder dataset instead of skipping it.")] = False,
    d_star: DStarOpt = 96,
    tau: TauOpt = 1.5,
    psi: PsiOpt = "identity",
    score_hidden: ScoreHiddenOpt = 192,
    epochs: Annotated[int, typer.Option(help="Maximum epochs.")] = 50,
    batch_size: Annotated[int, typer.Option(help="Batch size.")] = 128,
    lr: LrOpt = 3e-4,
    patience: PatienceOpt = 5,
    seed: Annotated[int, typer.Option(help="Seed for initialisation, shuffling and the validation split.")] = 1337,
    layers: LayersOpt = None,
    pool: PoolOpt = "auto",
    pretrained: PretrainedOpt = None,
    weights: WeightsOpt = None,
    arch: ArchOpt = None,
    input_size: InputSizeOpt = None,
    finetune: FinetuneOpt = None,
    trust_pickle: Annotated[bool, typer.Option(help="Allow --weights to be a fully pickled nn.Module. This runs code from the file: only for files you trust.")] = False,
    cache: CacheOpt = True,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run from the state saved beside --out (same options).")] = False,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps (auto: CUDA if available).")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or per-epoch lines.")] = False,
):
    """Train a head (LAYA or a baseline) on a backbone and write a checkpoint."""
    from .data import DataRequest
    from .heads import HeadConfig
    from .train import TrainConfig, TrainRequest, train as run_training

    progress.set_enabled(not quiet)
    if pool not in ("auto", "cls", "mean"):
        raise LayaError(f"--pool must be auto, cls or mean, got '{pool}'")
    if trust_pickle:
        err_console.print("[bold yellow]warning:[/] --trust-pickle lets the weights file run code on this machine")
    req = TrainRequest(
        backbone=backbone, head=head,
        head_config=HeadConfig(d_star=d_star, tau=tau, psi=psi, score_hidden=score_hidden),
        data=DataRequest(name=dataset, data_dir=data_dir, image_size=image_size, label=label, seed=seed, strict=strict),
        train=TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, patience=patience, seed=seed,
                          device=resolve_device(device)),
        layers=_split_csv(layers), pool=pool, pretrained=pretrained, weights=str(weights) if weights else None,
        finetune=finetune, trust_pickle=trust_pickle, use_cache=cache, out=str(out), resume=resume,
        arch=arch, input_size=input_size,
    )

    def on_epoch(r):
        if not quiet:
            mark = " [green]*best[/]" if r.best else ""
            console.print(f"epoch {r.epoch:3d}  loss {r.loss:.4f}  train acc {r.train_accuracy:.4f}  "
                          f"val acc {r.val_accuracy:.4f}  {r.seconds:.1f}s{mark}", highlight=False)

    ckpt = run_training(req, on_epoch)
    m = ckpt["metrics"]
    console.print(f"[bold]test accuracy {m['test_accuracy']:.4f}  macro-F1 {m['test_macro_f1']:.4f}[/]  "
                  f"(best epoch {m['best_epoch']} of {m['epochs_run']}) -> {out}", highlight=False)


@app.command()
def audit(
    model: Annotated[Path, typer.Argument(help="A laya checkpoint (model.pt).")],
    compare: Annotated[str, typer.Option(help="Methods to compare with laya and random: ig, gradxact, saliency, contrib, global (comma list), 'all', or '' for none.")] = "ig,gradxact",
    samples: Annotated[Optional[int], typer.Option(help="Audit a seeded random subset of N test samples (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the --samples subset and of the random method.")] = 0,
    dataset: Annotated[Optional[str], typer.Option(help="Audit another dataset (default: the checkpoint's own test split).")] = None,
    data_dir: Annotated[Optional[str], typer.Option(help="Where that dataset lives (see docs/datasets.md).")] = None,
    ablation: Annotated[str, typer.Option(help="How a layer is removed: mean (r_i := training mean), zero, or mask (α_i := 0; laya/scalarmix heads).")] = "mean",
    target: Annotated[str, typer.Option(help="Class explained: predicted (ŷ) or label (the true class).")] = "predicted",
    reduce: Annotated[str, typer.Option(help="Per-layer reduction of gradient attributions: sum (signed), abs or l2.")] = "sum",
    steps: Annotated[int, typer.Option(help="Integrated Gradients steps.")] = 32,
    internal_batch_size: Annotated[Optional[int], typer.Option(help="Memory bound: at most this many rows per IG head pass (Captum's internal_batch_size).")] = None,
    batch_size: Annotated[int, typer.Option(help="Samples per audited batch.")] = 256,
    by_class: Annotated[bool, typer.Option("--by-class", help="Add faithfulness and Deletion@1 per class.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every number and setting as JSON to this file.")] = None,
    markdown: Annotated[Optional[Path], typer.Option(help="Write the table as Markdown to this file (e.g. $GITHUB_STEP_SUMMARY).")] = None,
    fail_under: Annotated[Optional[list[str]], typer.Option(help="Exit 1 when a metric is below a threshold: 'faithfulness=0.7' (every method but random) or 'ig:faithfulness=0.8,laya:deletion@1=0.2'. Repeatable.")] = None,
    cache: Annotated[bool, typer.Option(help="Use the on-disk feature cache for frozen backbones.")] = True,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run from the state saved beside --out (same options).")] = False,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps (auto: CUDA if available).")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines.")] = False,
    arch: Annotated[Optional[str], typer.Option(help="Import this architecture (module:callable or file.py:callable) for a checkpoint trained with --arch.")] = None,
):
    """Audit how faithfully layer attributions (LAYA's own α, Captum's) explain each prediction."""
    from . import audit as A
    from .checkpoint import load_model
    from .evaldata import load_eval_data
    from .fileio import atomic_write_text, check_writable
    from .metrics import check_ablation
    from .report import audit_class_tables, audit_markdown, audit_rich_table

    progress.set_enabled(not quiet)
    if arch:
        from .backbones import trust_code
        trust_code(arch)  # zoo: the user names the code a --arch checkpoint needs
    if samples is not None and samples < 1:
        raise LayaError(f"--samples must be at least 1, got {samples}")
    settings = A.AuditSettings(ablation=ablation, target=target, reduce=reduce, steps=steps,
                               internal_batch_size=internal_batch_size, batch_size=batch_size, seed=seed,
                               by_class=by_class, device=resolve_device(device)).validate()
    methods = A.parse_methods(compare)
    thresholds = A.parse_thresholds(fail_under, methods)
    for path in (json_out, markdown):
        if path is not None:
            check_writable(path)
    laya_model = load_model(model)
    check_ablation(laya_model.head, settings.ablation)  # before any feature extraction
    data = load_eval_data(laya_model, dataset, data_dir, samples, seed, settings.device, use_cache=cache, stream=True)
    result = A.run_audit(laya_model, data, methods, settings)
    result.settings.update({"model": str(model), "samples": samples, "data_dir": data_dir,
                            "fail_under": [str(t) for t in thresholds]})
    misses = A.check_thresholds(result, thresholds)

    console.print(audit_rich_table(result))
    for table in audit_class_tables(result):
        console.print(table)
    for note in result.notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    if json_out is not None and distributed.is_main():  # under torchrun only rank 0 writes
        doc = result.to_dict()
        doc["fail_under"] = {"thresholds": [str(t) for t in thresholds], "misses": misses, "passed": not misses}
        atomic_write_text(json_out, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if markdown is not None and distributed.is_main():
        atomic_write_text(markdown, audit_markdown(result, misses if thresholds else None))
    if misses:
        for miss in misses:
            err_console.print(f"[bold red]fail-under:[/] {miss}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if thresholds:
        err_console.print(f"[green]fail-under: all {len(thresholds)} threshold(s) met[/]", highlight=False)


@app.command("export")
def export_cmd(
    model: Annotated[Path, typer.Argument(help="A laya checkpoint (model.pt).")],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder to write (created). A non-empty folder needs --overwrite.")] = Path("export"),
    fmt: Annotated[str, typer.Option("--format", help="Per-sample table format: csv, parquet (needs pyarrow) or npz.")] = "csv",
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Draw the PNG figures (report.html is written either way).")] = True,
    strip: Annotated[int, typer.Option("--strip", metavar="K", help="How many samples the image strip shows (0 = no strip).")] = 8,
    dataset: Annotated[Optional[str], typer.Option(help="Dataset to export on (default: the checkpoint's own, test split).")] = None,
    data_dir: Annotated[Optional[str], typer.Option(help="Where the dataset lives (see docs/datasets.md).")] = None,
    samples: Annotated[Optional[int], typer.Option(help="Export a seeded random subset of N test samples (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the --samples subset.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or mps (auto: CUDA if available).")] = "auto",
    overwrite: Annotated[bool, typer.Option(help="Replace --out if it holds a previous laya export (never any other folder).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables; only errors and notes.")] = False,
    arch: Annotated[Optional[str], typer.Option(help="Import this architecture (module:callable or file.py:callable) for a checkpoint trained with --arch.")] = None,
):
    """Export per-sample layer attention as tables, PNG plots and one self-contained report.html."""
    import matplotlib
    if arch:
        from .backbones import trust_code
        trust_code(arch)  # zoo: the user names the code a --arch checkpoint needs

    matplotlib.use("Agg")  # headless: no display needed (plots.py draws without pyplot anyway)
    from .export import run_export, shift_table

    progress.set_enabled(not quiet)
    exp = run_export(model, out, fmt=fmt, plots=plots, strip=strip, dataset=dataset, data_dir=data_dir,
                     samples=samples, seed=seed, device=resolve_device(device), overwrite=overwrite)
    for note in exp.notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    if quiet:
        return
    if exp.has_alpha:
        g = exp.global_profile
        a = g[(g["quantity"] == "alpha") & (g["subset"] == "all")]
        console.print("mean α per layer:  " + "  ".join(f"{name} {m:.3f}" for name, m in zip(a["layer"], a["mean"])),
                      highlight=False)
        console.print(shift_table(exp))
    console.print(f"[bold]exported {exp.n:,} samples[/] (accuracy {exp.accuracy:.4f}, {len(exp.files)} files) "
                  f"-> {exp.out}/   report: {exp.out / 'report.html'}", highlight=False)


bench_app = typer.Typer(
    help="Compare heads over seeds (accuracy, faithfulness, Deletion@1); 'laya bench speed' runs the speed benchmarks.",
    invoke_without_command=True, no_args_is_help=False, add_completion=False,
)
app.add_typer(bench_app, name="bench")


@bench_app.callback()
def bench(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Option(help="digits, fashion-mnist, cifar10, artworks or folder:PATH.")] = "digits",
    backbone: Annotated[str, typer.Option(help="mlp, cnn, vit_base, timm:NAME or torchvision:NAME.")] = "mlp",
    heads: Annotated[str, typer.Option(help="Comma list of heads to compare: last, concat, scalarmix, laya.")] = "last,concat,scalarmix,laya",
    seeds: Annotated[int, typer.Option(help="Runs per head; run k uses seed --base-seed + k (init, shuffling, validation split).")] = 3,
    base_seed: Annotated[int, typer.Option(help="Seed of the first run (1337: the paper config).")] = 1337,
    out: Annotated[Path, typer.Option(help="Output folder; runs go to OUT/<dataset>-<backbone>/ and finished ones are reused.")] = Path("bench"),
    data_dir: DataDirOpt = None,
    label: LabelOpt = "genre",
    image_size: ImageSizeOpt = None,
    d_star: DStarOpt = 96,
    tau: TauOpt = 1.5,
    psi: PsiOpt = "identity",
    score_hidden: ScoreHiddenOpt = 192,
    epochs: Annotated[int, typer.Option(help="Maximum epochs per run.")] = 50,
    batch_size: Annotated[int, typer.Option(help="Training batch size.")] = 128,
    lr: LrOpt = 3e-4,
    patience: PatienceOpt = 5,
    layers: LayersOpt = None,
    pool: PoolOpt = "auto",
    pretrained: PretrainedOpt = None,
    weights: WeightsOpt = None,
    finetune: FinetuneOpt = None,
    compare: Annotated[str, typer.Option(help="Methods audited besides laya and random (as laya audit --compare).")] = "ig,gradxact,contrib,global",
    audit_samples: Annotated[int, typer.Option(help="Audit this many test samples (the same seeded subset for every run; more than the test split = all).")] = 2000,
    audit_seed: Annotated[int, typer.Option(help="Seed of the audited subset and of the random method.")] = 0,
    ablation: Annotated[str, typer.Option(help="How a layer is removed: mean, zero (mask: laya/scalarmix heads only).")] = "mean",
    target: Annotated[str, typer.Option(help="Class explained: predicted or label.")] = "predicted",
    reduce: Annotated[str, typer.Option(help="Per-layer reduction of gradient attributions: sum, abs or l2.")] = "sum",
    steps: Annotated[int, typer.Option(help="Integrated Gradients steps.")] = 32,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every number, run and setting as JSON to this file.")] = None,
    markdown: Annotated[Optional[Path], typer.Option(help="Write the tables as Markdown to this file.")] = None,
    redo: Annotated[bool, typer.Option(help="Retrain and re-audit every run, even finished ones.")] = False,
    cache: CacheOpt = True,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines (the tables are still printed).")] = False,
):
    """Train every head with every seed, audit each, and print the paper's comparison tables."""
    if ctx.invoked_subcommand is not None:
        return
    from . import bench as B
    from .fileio import atomic_write_text, check_writable
    from .heads import HeadConfig

    progress.set_enabled(not quiet)
    for path in (json_out, markdown):
        if path is not None:
            check_writable(path)
    req = B.BenchRequest(
        dataset=dataset, backbone=backbone, heads=B.parse_heads(heads), seeds=seeds, base_seed=base_seed, out=str(out),
        data_dir=data_dir, label=label, image_size=image_size,
        head_config=HeadConfig(d_star=d_star, tau=tau, psi=psi, score_hidden=score_hidden),
        epochs=epochs, batch_size=batch_size, lr=lr, patience=patience, layers=_split_csv(layers), pool=pool,
        pretrained=pretrained, weights=str(weights) if weights else None, finetune=finetune, use_cache=cache,
        compare=compare, audit_samples=audit_samples, audit_seed=audit_seed, ablation=ablation, target=target,
        reduce=reduce, steps=steps, device=resolve_device(device), redo=redo,
    ).validate()

    def on_run(o, i, n):
        if quiet:
            return
        m = o.record["metrics"]
        what = "reused" if not o.trained and not o.audited else ("re-audited" if not o.trained else "trained")
        console.print(f"[{i}/{n}] {o.head:<9} seed {o.seed}  test acc {m['test_accuracy']:.4f}  macro-F1 "
                      f"{m['test_macro_f1']:.4f}  ({what})", highlight=False)

    result = B.run_bench(req, on_run)
    tables = B.rich_tables(result)
    out = console
    if not console.is_terminal:  # a log or a pipe has no width: print the tables whole, not cut to 80 columns
        out = Console(width=max([console.width, *(console.measure(t).maximum for t in tables)]))
    for table in tables:
        out.print(table)
    out.print(B.caption(result), style="dim", highlight=False)
    if not quiet:
        console.print(f"{len(result.runs)} runs ({result.reused} reused) in {result.wall_seconds:.0f} s -> "
                      f"{req.folder}", highlight=False)
    if json_out is not None:
        atomic_write_text(json_out, result.to_json())
    if markdown is not None:
        atomic_write_text(markdown, B.markdown(result))


@bench_app.command("speed")
def bench_speed(
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sizes (a smoke run, not a measurement).")] = False,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every timing and peak memory as JSON.")] = None,
):
    """Run every speed benchmark (each in a fresh process) and print all ratios and peak memory side by side."""
    from .bench import load_speed_benchmarks
    from .fileio import atomic_write_text, check_writable

    if json_out is not None:
        check_writable(json_out)
    speed = load_speed_benchmarks()
    summary = speed.run_all(quick=quick, device=resolve_device(device))
    (console if console.is_terminal else Console(width=110)).print(speed.summary_table(summary))
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(summary, indent=2) + "\n")


def checkpoint_summary(ckpt: dict) -> dict:
    """The JSON shape of ``laya info`` (documented in docs/checkpoint.md)."""
    spec = ckpt["backbone"]["spec"]
    return {
        "format_version": ckpt["format_version"],
        "versions": ckpt["versions"],
        "head": {"kind": ckpt["head"]["kind"], "config": ckpt["head"]["config"]},
        "backbone": {"name": spec["name"], "pretrained": spec["pretrained"], "finetune": spec["finetune"],
                     "pool": spec["pool"], "weights_in_file": ckpt["backbone"]["weights"] is not None,
                     # zoo: where the weights came from, their SHA-256, each tap's layout
                     "weights_source": ckpt["backbone"].get("source"), "weights_sha256": ckpt["backbone"].get("sha256"),
                     "formats": list(ckpt["backbone"].get("formats") or spec.get("formats") or [])},
        "layers": list(ckpt["layers"]),
        "dims": list(ckpt["dims"]),
        "classes": list(ckpt["classes"]),
        "dataset": ckpt["dataset"],
        "metrics": ckpt["metrics"],
        "train_config": ckpt.get("train_config", {}),
        "epochs": len(ckpt.get("history", [])),
    }


@app.command()
def info(
    model: Annotated[Path, typer.Argument(help="A laya checkpoint (model.pt).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a panel.")] = False,
):
    """Show what a checkpoint holds: backbone, layers, head, classes and test metrics."""
    from .checkpoint import read_checkpoint

    summary = checkpoint_summary(read_checkpoint(model))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    table = Table.grid(padding=(0, 2))
    b, h, m = summary["backbone"], summary["head"], summary["metrics"]
    rows = [
        ("backbone", f"{b['name']} ({'fine-tuned' if b['finetune'] else 'frozen'}, pool {b['pool']})"),
        ("layers", f"{len(summary['layers'])}: " + ", ".join(summary["layers"])),
        ("head", f"{h['kind']}  " + "  ".join(f"{k}={v}" for k, v in h["config"].items())),
        ("classes", f"{len(summary['classes'])}: " + ", ".join(summary["classes"][:12])
         + (" …" if len(summary["classes"]) > 12 else "")),
        ("dataset", summary["dataset"]["name"]),
        *([("unmatched", f"{len(u)} artist folder(s) match no row of artists.csv: " + ", ".join(u))]
          if (u := summary["dataset"].get("unmatched")) else []),
        *([("weights", f"{b['weights_source']}  sha256 {(b['weights_sha256'] or '')[:16]}")] if b.get("weights_source") else []),
        ("test accuracy", f"{m['test_accuracy']:.4f}"),
        ("test macro-F1", f"{m['test_macro_f1']:.4f}"),
        ("epochs", f"{m['epochs_run']} (best {m['best_epoch']})"),
        ("versions", "  ".join(f"{k} {v}" for k, v in summary["versions"].items())),
    ]
    for k, v in rows:
        table.add_row(f"[bold]{k}[/]", v)
    console.print(Panel(table, title=f"laya checkpoint {model}", expand=False))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
