"""``laya depth``: parse, run the depth job (``depthing.job``), render its tables and write its files."""

from __future__ import annotations

from functools import partial

from ..runtime import progress
from ..runtime.config import DepthSettings, EvalRequest, LMSettings
from ..runtime.errors import LayaError
from .common import console, note, pick_device, print_tables, refuse_device_map, run_options, trust_arch, write_outputs
from .declared import Use, with_settings
from .options import ArchImport, Cache, JsonOut, MarkdownOut, MaxMemory, ModelPath, PlotOut, Quiet, Replace, TruncateOut

DEPTH = DepthSettings()


@with_settings(settings=DepthSettings, data=EvalRequest, lm=Use(LMSettings, only=("device_map",)))
def depth(
    model: ModelPath,
    out: TruncateOut = None,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    plot: PlotOut = None,
    cache: Cache = True,
    quiet: Quiet = False,
    arch: ArchImport = None,
    max_memory: MaxMemory = None,
    overwrite: Replace = False,
    *,
    settings: DepthSettings,
    data: EvalRequest,
    lm: LMSettings,
):
    """How deep must the model be? Accuracy and compute when cut after each tap, early exit, a shallower model out."""
    from ..depthing.dropped import load_drop_data
    from ..depthing.job import depth_job
    from ..model.evaldata import load_eval_data
    from ..model.laya_model import model_from_checkpoint
    from ..model.lenses import is_language_model
    from ..report.depth import truncate_line
    from ..runtime.fileio import check_new_outputs

    with progress.enabled(not quiet):
        trust_arch(arch)
        data.validate()
        batch_size, thresholds_given = settings.batch_size, settings.thresholds is not None
        if batch_size is None:  # the plan may lower the default
            settings.batch_size = DEPTH.batch_size
        settings.device = pick_device(settings.device)
        settings.validate()
        truncate, drop, samples = settings.truncate, settings.drop, data.samples
        check_writes(truncate, drop, out, plot)
        check_new_outputs({"--json": json_out, "--markdown": markdown, "--plot": plot, "--out": out}, overwrite)
        if is_language_model(ckpt := depth_checkpoint(model, truncate, drop, settings.refit, plot)):
            outputs = (json_out, markdown)
            return token_depth(ckpt, data, thresholds_given, settings, outputs, model, lm.device_map)
        refuse_device_map(lm.device_map)
        laya_model = model_from_checkpoint(ckpt)
        if drop is not None:
            load = partial(
                load_drop_data, laya_model, data.dataset, data.data_dir, samples, settings.seed, data.encoding
            )
            result = depth_job(laya_model, load, settings, out, overwrite=overwrite)
            result.settings.update({"model": str(model), "samples": samples})
            return render_drop(result, json_out, markdown)
        where = (data.dataset, data.data_dir, samples, settings.seed, settings.device)
        load = partial(load_eval_data, laya_model, *where, use_cache=cache, encoding=data.encoding)
        memory = run_options(max_memory, "auto", batch_size=batch_size)["memory"]
        result = depth_job(laya_model, load, settings, out, use_cache=cache, memory=memory, overwrite=overwrite)
        if truncate is not None:
            console.print(truncate_line(result), highlight=False, soft_wrap=True, markup=False)
            return
    result.settings.update({"model": str(model), "samples": samples, "data_dir": data.data_dir})
    render(result, json_out, markdown, plot)


def check_writes(truncate, drop, out, plot) -> None:
    """What each mode writes: --truncate K needs --out, --out needs --truncate or --drop, --drop draws no plot."""
    if truncate is not None and out is None:
        raise LayaError("--truncate K writes a checkpoint: name it with --out small.pt")
    if drop is not None and plot is not None:
        raise LayaError("--plot draws the truncation curve; --drop prints its table (--json, --markdown)")
    if out is not None and truncate is None and drop is None:
        raise LayaError("--out names the checkpoint --truncate K or --drop K writes; add one of them")


def render(result, json_out, markdown, plot) -> None:
    """The tables and notes on the terminal; the JSON, Markdown and plot asked for (rank 0 only)."""
    from ..report.depth import depth_markdown, depth_rich_tables
    from ..runtime import distributed
    from ..runtime.fileio import atomic_path
    from ..runtime.tracking.events import log_depth
    from .command import current_run

    run = current_run()
    result.settings["options"] = run.record  # the resolved options: defaults, --config, flags
    doc = result.to_dict()
    print_tables(depth_rich_tables(doc))
    for text in result.notes:
        note(text)
    if not distributed.is_main():
        return
    write_outputs(json_out, result.to_json, markdown, lambda: depth_markdown(doc))
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        from ..report.figures import plot_depth

        with atomic_path(plot) as tmp:
            plot_depth(doc, tmp)
    log_depth(run.track(f"depth {result.settings.get('model')}"), doc, [json_out, markdown, plot])


def render_drop(result, json_out, markdown) -> None:
    """The drop table and the chosen order's cost on the terminal, the goals and written lines; JSON, Markdown."""
    from ..report.drop import drop_lines, drop_markdown, drop_rich_tables
    from ..runtime import distributed
    from .command import current_run

    result.settings["options"] = current_run().record
    doc = result.to_dict()
    print_tables(drop_rich_tables(doc))
    for line in drop_lines(doc):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for text in result.notes:
        note(text)
    if not distributed.is_main():
        return
    write_outputs(json_out, result.to_json, markdown, lambda: drop_markdown(doc))


def depth_checkpoint(path, truncate, drop, refit, plot) -> dict:
    """The checkpoint, read once; a language model's is refused with the options that read classifiers."""
    from ..model.checkpoint import read_checkpoint
    from ..model.lenses import is_language_model

    ckpt = read_checkpoint(path)
    if not is_language_model(ckpt):
        return ckpt
    if truncate is not None or drop is not None or refit or plot is not None:
        raise LayaError(
            "a language model's depth is its early exit per token: --truncate, --drop, --refit and --plot read "
            "classifiers"
        )
    return ckpt


def token_depth(ckpt, data, thresholds_given: bool, settings, outputs, path, device_map=None) -> None:
    """``laya depth`` on a ``--task lm`` checkpoint: early exit per token (depthing/token_exit.py)."""
    from ..depthing.token_exit import TOKEN_THRESHOLDS, token_exit_job
    from ..model.lenses import lens_model_from_checkpoint
    from ..report.lm import exit_markdown, exit_rich_tables
    from ..runtime.fileio import strict_json

    json_out, markdown = outputs
    model = lens_model_from_checkpoint(ckpt, device_map).to(settings.device)
    chosen, tokens = settings.thresholds if thresholds_given else TOKEN_THRESHOLDS, data.samples or 20_000
    result = token_exit_job(model, data.dataset, tokens, chosen, settings.batch_size or 16).to_dict()
    result["settings"] = {"model": str(path), "thresholds": list(chosen), "tokens": tokens}
    if not model.has_tuned_lens:  # --lens logit|none: its untrained translators are the logit lens
        result["lens_note"] = f"trained with --lens {model.lens}: tuned_p_max reads the logit lens"
        note(result["lens_note"])
    for table in exit_rich_tables(result):
        console.print(table)
    write_outputs(json_out, lambda: strict_json(result), markdown, lambda: exit_markdown(result))
