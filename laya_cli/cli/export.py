"""``laya export``: per-sample layer attention as tables, PNG plots and report.html (the job:
``exporting.run.run_export``)."""

from __future__ import annotations

from pathlib import Path

from ..runtime import progress
from ..runtime.config import EvalRequest, LMSettings
from .common import console, note, pick_device, refuse_device_map, trust_arch
from .declared import Use, with_settings
from .options import (
    ArchImport,
    AuditIn,
    DepthIn,
    Device,
    ExportFormat,
    ExportOut,
    ExportQuiet,
    MaxMemory,
    ModelCard,
    ModelPath,
    Overwrite,
    Plots,
    Strip,
    SubsetSeed,
)


@with_settings(data=EvalRequest, lm=Use(LMSettings, only=("device_map",)))
def export(
    model: ModelPath,
    out: ExportOut = Path("export"),
    fmt: ExportFormat = None,
    plots: Plots = True,
    strip: Strip = 8,
    seed: SubsetSeed = 0,
    device: Device = "auto",
    overwrite: Overwrite = False,
    quiet: ExportQuiet = False,
    arch: ArchImport = None,
    audit: AuditIn = None,
    depth: DepthIn = None,
    max_memory: MaxMemory = None,
    model_card: ModelCard = False,
    *,
    data: EvalRequest,
    lm: LMSettings,
):
    """Export per-sample layer attention as tables, PNG plots and one self-contained report.html."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display needed (figures.py draws without pyplot anyway)
    from ..exporting.run import run_export
    from ..report.export import shift_table
    from ..runtime.memory import MemoryRequest
    from ..runtime.tracking.events import log_export
    from .command import current_run

    with progress.enabled(not quiet):
        trust_arch(arch)
        dataset, data_dir, encoding, samples = data.validate().dataset, data.data_dir, data.encoding, data.samples
        classifier_only = (audit, depth, model_card, data_dir)
        lens = language_model(model, pick_device(device), fmt, classifier_only, lm.device_map)
        if lens is not None:
            return export_language_model(lens, model, out, fmt, plots, dataset, samples, overwrite, encoding, quiet)
        refuse_device_map(lm.device_map)
        exp = run_export(
            model,
            out,
            fmt=fmt or "csv",
            plots=plots,
            strip=strip,
            dataset=dataset,
            data_dir=data_dir,
            encoding=encoding,
            samples=samples,
            seed=seed,
            device=pick_device(device),
            overwrite=overwrite,
            audit=audit,
            depth=depth,
            memory=MemoryRequest(max_memory),
            model_card=model_card,
        )
    log_export(current_run().track(f"export {model}"), exp)
    for text in exp.notes:
        note(text)
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


def language_model(path, device: str, fmt, classifier_options: tuple, device_map: str | None = None):
    """A ``--task lm`` checkpoint rebuilt (its export is per token: exporting/tokens.py), None for a classifier's;
    the options only a classifier's export reads are refused for it first."""
    from ..exporting.tokens import check_token_format
    from ..model.checkpoint import read_checkpoint
    from ..model.lenses import is_language_model, lens_model_from_checkpoint
    from ..runtime.errors import LayaError

    audit, depth, model_card, data_dir = classifier_options
    ckpt = read_checkpoint(path)
    if not is_language_model(ckpt):
        return None
    given = [name for name, v in (("--audit", audit), ("--depth", depth), ("--model-card", model_card),
                                  ("--data-dir", data_dir)) if v]  # fmt: skip
    if given:
        raise LayaError(f"{', '.join(given)}: not read by a language model's export (its tokens come from "
                        "--dataset text:PATH)")  # fmt: skip
    if fmt is not None:
        check_token_format(fmt)
    return lens_model_from_checkpoint(ckpt, device_map).to(device)


def export_language_model(model, path, out, fmt, plots, dataset, samples, overwrite, encoding, quiet) -> None:
    """``laya export`` on a language model: α per held-out token, the heat map and the text explorer."""
    from ..exporting.tokens import run_token_export
    from ..runtime.tracking.events import log_export
    from .command import current_run

    exp = run_token_export(model, out, fmt or default_token_format(), plots, dataset, samples, overwrite,
                           {"checkpoint": str(path)}, encoding)  # fmt: skip
    log_export(current_run().track(f"export {path}"), exp)
    if quiet:
        return
    console.print("mean α per layer:  " + "  ".join(f"{n} {m:.3f}" for n, m in zip(exp.layers, exp.mean_alpha)),
                  highlight=False)  # fmt: skip
    console.print(
        f"[bold]exported {exp.n:,} tokens[/] in {exp.n_blocks:,} blocks (LAYA next-token accuracy "
        f"{exp.accuracy:.4f}, {len(exp.files)} files) -> {exp.out}/   report: {exp.out / 'report.html'}",
        highlight=False,
    )


def default_token_format() -> str:
    """parquet where pyarrow is installed, else csv."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return "csv"
    return "parquet"
