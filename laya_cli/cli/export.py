"""``laya export``: per-sample layer attention as tables, PNG plots and report.html (the job:
``exporting.tasks.export_checkpoint``)."""

from __future__ import annotations

from pathlib import Path

from ..data.settings import EvalDataSettings
from ..exporting.settings import ExportSettings
from ..model.settings import LoadSettings
from ..runtime import progress
from ..runtime.environment import RunSettings
from .common import console, escape, note, trust_arch
from .declared import Use, with_settings
from .options import ExportOut, ExportQuiet, ModelPath, Overwrite


@with_settings(
    settings=ExportSettings, data=EvalDataSettings, load=LoadSettings, run=Use(RunSettings, only=("max_memory",))
)
def export(
    model: ModelPath,
    out: ExportOut = Path("export"),
    overwrite: Overwrite = False,
    quiet: ExportQuiet = False,
    *,
    settings: ExportSettings,
    data: EvalDataSettings,
    load: LoadSettings,
    run: RunSettings,
):
    """Export per-sample layer attention as tables, PNG plots and one self-contained report.html."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display needed (figures.py draws without pyplot anyway)
    from ..exporting.tasks import export_checkpoint
    from ..runtime.device import resolved
    from ..runtime.tracking.events import log_export
    from .command import current_run

    with progress.enabled(not quiet):
        trust_arch(load.arch)
        exp = export_checkpoint(model, out, resolved(settings), data, load, overwrite, run.memory)
    log_export(current_run().track(f"export {model}"), exp)
    for text in getattr(exp, "notes", []):
        note(text)
    if not quiet:
        for line in exported_lines(exp):
            console.print(line, highlight=False)


def exported_lines(exp) -> list:
    """What an export shows, by what its tables hold (``Export.kind``): the mean α per layer, the attention shift (a
    classifier's), the files written."""
    return EXPORTED_LINES[exp.kind](exp)


def class_lines(exp) -> list:
    """A classifier's export: the mean α per layer and the attention shift (a head with α), the samples written."""
    from ..report.export import shift_table

    lines = []
    if exp.has_alpha:
        g = exp.global_profile
        a = g[(g["quantity"] == "alpha") & (g["subset"] == "all")]
        lines += [
            "mean α per layer:  " + "  ".join(f"{escape(name)} {m:.3f}" for name, m in zip(a["layer"], a["mean"])),
            shift_table(exp),
        ]
    return lines + [
        f"[bold]exported {exp.n:,} samples[/] (accuracy {exp.accuracy:.4f}, {len(exp.files)} files) "
        f"-> {escape(str(exp.out))}/   report: {escape(str(exp.out / 'report.html'))}"
    ]


def token_lines(exp) -> list:
    """A language model's export: the mean α per layer, the tokens and blocks written."""
    return [
        "mean α per layer:  " + "  ".join(f"{escape(n)} {m:.3f}" for n, m in zip(exp.layers, exp.mean_alpha)),
        f"[bold]exported {exp.n:,} tokens[/] in {exp.n_blocks:,} blocks (LAYA next-token accuracy "
        f"{exp.accuracy:.4f}, {len(exp.files)} files) -> {escape(str(exp.out))}/   report: "
        + escape(str(exp.out / "report.html")),
    ]


EXPORTED_LINES = {"classes": class_lines, "tokens": token_lines}  # by Export.kind
