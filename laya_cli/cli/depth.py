"""``laya depth``: parse, run the depth job (``depthing.job``), render its tables and write its files."""

from __future__ import annotations

from functools import partial

from ..data.settings import EvalDataSettings
from ..depthing.settings import DepthSettings
from ..model.settings import LoadSettings
from ..runtime import progress
from ..runtime.environment import RunSettings
from ..runtime.errors import LayaError
from .common import console, note, print_tables, trust_arch, write_outputs
from .declared import Use, with_settings
from .options import JsonOut, MarkdownOut, ModelPath, PlotOut, Quiet, Replace, TruncateOut


@with_settings(
    settings=DepthSettings, data=EvalDataSettings, load=LoadSettings, run=Use(RunSettings, skip=("precision",))
)
def depth(
    model: ModelPath,
    out: TruncateOut = None,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    plot: PlotOut = None,
    quiet: Quiet = False,
    overwrite: Replace = False,
    *,
    settings: DepthSettings,
    data: EvalDataSettings,
    load: LoadSettings,
    run: RunSettings,
):
    """How deep must the model be? Accuracy and compute when cut after each tap, early exit, a shallower model out."""
    from ..exporting.tasks import depth_checkpoint
    from ..runtime.device import resolved
    from ..runtime.fileio import check_new_outputs

    with progress.enabled(not quiet):
        trust_arch(load.arch)
        run = run.with_batches(batch_size=settings.batch_size)  # the command line's None: the plan may lower it
        settings = resolved(settings)
        check_writes(settings.truncate, settings.drop, out, plot)
        check_new_outputs({"--json": json_out, "--markdown": markdown, "--plot": plot, "--out": out}, overwrite)
        result = depth_checkpoint(model, settings, data, load, out, partial(check_plot, plot), run, overwrite)
    render(result, json_out, markdown, plot)


def check_writes(truncate, drop, out, plot) -> None:
    """What each mode writes: --truncate K needs --out, --out needs --truncate or --drop, --drop draws no plot."""
    if truncate is not None and out is None:
        raise LayaError("--truncate K writes a checkpoint: name it with --out small.pt")
    if drop is not None and plot is not None:
        raise LayaError("--plot draws the truncation curve; --drop prints its table (--json, --markdown)")
    if out is not None and truncate is None and drop is None:
        raise LayaError("--out names the checkpoint --truncate K or --drop K writes; add one of them")


def check_plot(plot, task) -> None:
    """``--plot`` draws a classifier's truncation curve: a language model's depth is its early exit per token
    (``task``: the checkpoint's ``Task``)."""
    if plot is not None and not task.depth_curve:
        raise LayaError("--plot draws a classifier's truncation curve; a language model's depth is its early exit "
                        "per token (--json, --markdown)")  # fmt: skip


def render(result, json_out, markdown, plot) -> None:
    """Each kind of result as its tables and files: the analysis, a truncated checkpoint's line, the drop table,
    a language model's early exit."""
    from ..depthing.analysis import TruncateResult
    from ..depthing.drop_table import DropResult
    from ..report.depth import truncate_line

    if isinstance(result, TruncateResult):
        console.print(truncate_line(result), highlight=False, soft_wrap=True, markup=False)
    elif isinstance(result, DropResult):
        render_drop(result, json_out, markdown)
    else:  # a DepthResult: what its tables hold says how to show them
        RENDER_ANALYSIS[result.kind](result, json_out, markdown, plot)


def render_analysis(result, json_out, markdown, plot) -> None:
    """The tables and notes on the terminal; the JSON, Markdown and plot asked for (rank 0 only)."""
    from ..report.depth import depth_markdown, depth_rich_tables
    from ..runtime import distributed
    from ..runtime.fileio import atomic_path
    from ..runtime.tracking.events import log_depth
    from .command import current_run

    run = current_run()
    result.settings["options"] = run.record  # the resolved options: defaults, --config, flags
    doc = result.to_dict()
    if distributed.is_main():  # the files first: one that cannot be written is the only line (a full disk)
        write_outputs(json_out, result.to_json, markdown, lambda: depth_markdown(doc))
        if plot is not None:
            import matplotlib

            matplotlib.use("Agg")
            from ..report.figures import plot_depth

            with atomic_path(plot) as tmp:
                plot_depth(doc, tmp)
    print_tables(depth_rich_tables(doc))
    for text in result.notes:
        note(text)
    if distributed.is_main():
        log_depth(run.track(f"depth {result.settings.get('model')}"), doc, [json_out, markdown, plot])


def render_drop(result, json_out, markdown) -> None:
    """The drop table and the chosen order's cost on the terminal, the goals and written lines; JSON, Markdown."""
    from ..report.drop import drop_lines, drop_markdown, drop_rich_tables
    from ..runtime import distributed
    from .command import current_run

    result.settings["options"] = current_run().record
    doc = result.to_dict()
    if distributed.is_main():  # the files first: one that cannot be written is the only line (a full disk)
        write_outputs(json_out, result.to_json, markdown, lambda: drop_markdown(doc))
    print_tables(drop_rich_tables(doc))
    for line in drop_lines(doc):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for text in result.notes:
        note(text)


def render_token_exit(result, json_out, markdown, plot=None) -> None:
    """A language model's early exit per token: its tables, its note, the JSON and Markdown asked for (``plot``: none,
    ``check_plot`` refused it)."""
    from ..report.lm import exit_markdown, exit_rich_tables
    from ..runtime.fileio import strict_json

    doc = result.to_dict()
    write_outputs(json_out, lambda: strict_json(doc), markdown, lambda: exit_markdown(doc))  # first: see above
    if result.lens_note:
        note(result.lens_note)
    for table in exit_rich_tables(doc):
        console.print(table)
    for text in result.notes:  # the flags, as a classifier's depth says them
        note(text)


RENDER_ANALYSIS = {"layers": render_analysis, "tokens": render_token_exit}  # by DepthResult.kind
