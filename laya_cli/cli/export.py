"""``laya export``: per-sample layer attention as tables, PNG plots and report.html (the job:
``exporting.run.run_export``)."""

from __future__ import annotations

from pathlib import Path

from ..runtime import progress
from .common import console, note, pick_device, trust_arch
from .options import (
    ArchImport,
    AuditIn,
    DataDir,
    DepthIn,
    Device,
    Encoding,
    EvalDataset,
    ExportFormat,
    ExportOut,
    ExportQuiet,
    MaxMemory,
    ModelCard,
    ModelPath,
    Overwrite,
    Plots,
    Samples,
    Strip,
    SubsetSeed,
)


def export(
    model: ModelPath,
    out: ExportOut = Path("export"),
    fmt: ExportFormat = "csv",
    plots: Plots = True,
    strip: Strip = 8,
    dataset: EvalDataset = None,
    data_dir: DataDir = None,
    encoding: Encoding = None,
    samples: Samples = None,
    seed: SubsetSeed = 0,
    device: Device = "auto",
    overwrite: Overwrite = False,
    quiet: ExportQuiet = False,
    arch: ArchImport = None,
    audit: AuditIn = None,
    depth: DepthIn = None,
    max_memory: MaxMemory = None,
    model_card: ModelCard = False,
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
        exp = run_export(
            model,
            out,
            fmt=fmt,
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
