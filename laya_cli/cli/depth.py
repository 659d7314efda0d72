"""``laya depth``: parse, run the depth job (``depthing.job``), render its tables and write its files."""

from __future__ import annotations

from functools import partial

from ..runtime import progress
from ..runtime.errors import LayaError
from .common import console, note, pick_device, print_tables, refuse_device_map, run_options, trust_arch, write_outputs
from .options import (
    DEPTH,
    ArchImport,
    Cache,
    DataDir,
    DepthBatchSize,
    Device,
    DeviceMap,
    Drop,
    DropDraws,
    DropOrder,
    Encoding,
    EvalDataset,
    JsonOut,
    MarkdownOut,
    MaxMemory,
    ModelPath,
    PlotOut,
    Quiet,
    Refit,
    RefitEpochs,
    Samples,
    SubsetSeed,
    Thresholds,
    TimeBatch,
    TimeRepeats,
    Truncate,
    TruncateOut,
    split_csv,
)


def depth(
    model: ModelPath,
    refit: Refit = DEPTH.refit,
    refit_epochs: RefitEpochs = None,
    thresholds: Thresholds = None,
    truncate: Truncate = None,
    out: TruncateOut = None,
    drop: Drop = None,
    drop_order: DropOrder = DEPTH.drop_order,
    draws: DropDraws = DEPTH.drop_draws,
    samples: Samples = None,
    seed: SubsetSeed = DEPTH.seed,
    dataset: EvalDataset = None,
    data_dir: DataDir = None,
    encoding: Encoding = None,
    batch_size: DepthBatchSize = None,
    time_repeats: TimeRepeats = DEPTH.time_repeats,
    time_batch: TimeBatch = DEPTH.time_batch,
    json_out: JsonOut = None,
    markdown: MarkdownOut = None,
    plot: PlotOut = None,
    cache: Cache = True,
    device: Device = "auto",
    quiet: Quiet = False,
    arch: ArchImport = None,
    max_memory: MaxMemory = None,
    device_map: DeviceMap = None,
):
    """How deep must the model be? Accuracy and compute when cut after each tap, early exit, a shallower model out."""
    from ..depthing.dropped import load_drop_data
    from ..depthing.job import depth_job
    from ..model.evaldata import load_eval_data
    from ..model.laya_model import model_from_checkpoint
    from ..model.lenses import is_language_model
    from ..report.depth import truncate_line
    from ..runtime.config import EXIT_THRESHOLDS, DepthSettings, check_at_least, check_encoding
    from ..runtime.fileio import check_outputs

    with progress.enabled(not quiet):
        trust_arch(arch)
        check_at_least("--samples", samples)
        check_encoding(encoding)
        settings = DepthSettings(
            batch_size=DEPTH.batch_size if batch_size is None else batch_size,
            seed=seed,
            refit=refit,
            refit_epochs=refit_epochs,
            thresholds=tuple(split_csv(thresholds)) if thresholds is not None else EXIT_THRESHOLDS,
            time_repeats=time_repeats,
            time_batch=time_batch,
            truncate=truncate,
            drop=drop,
            drop_order=drop_order,
            drop_draws=draws,
            device=pick_device(device),
        ).validate()
        check_writes(truncate, drop, out, plot)
        check_outputs(json_out, markdown, plot, out)
        if is_language_model(ckpt := depth_checkpoint(model, truncate, drop, refit, plot)):
            return token_depth(ckpt, dataset, samples, thresholds, settings, (json_out, markdown), model, device_map)
        refuse_device_map(device_map)
        laya_model = model_from_checkpoint(ckpt)
        if drop is not None:
            load = partial(load_drop_data, laya_model, dataset, data_dir, samples, seed, encoding)
            result = depth_job(laya_model, load, settings, out)
            result.settings.update({"model": str(model), "samples": samples})
            return render_drop(result, json_out, markdown)
        where = (dataset, data_dir, samples, seed, settings.device)
        data = partial(load_eval_data, laya_model, *where, use_cache=cache, encoding=encoding)
        memory = run_options(max_memory, "auto", batch_size=batch_size)["memory"]
        result = depth_job(laya_model, data, settings, out, use_cache=cache, memory=memory)
        if truncate is not None:
            console.print(truncate_line(result), highlight=False, soft_wrap=True, markup=False)
            return
    result.settings.update({"model": str(model), "samples": samples, "data_dir": data_dir})
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


def token_depth(ckpt, dataset, samples, thresholds, settings, outputs, path, device_map=None) -> None:
    """``laya depth`` on a ``--task lm`` checkpoint: early exit per token (depthing/token_exit.py)."""
    from ..depthing.token_exit import TOKEN_THRESHOLDS, token_exit_job
    from ..model.lenses import lens_model_from_checkpoint
    from ..report.lm import exit_markdown, exit_rich_tables
    from ..runtime.fileio import strict_json

    json_out, markdown = outputs
    model = lens_model_from_checkpoint(ckpt, device_map).to(settings.device)
    chosen = settings.thresholds if thresholds is not None else TOKEN_THRESHOLDS
    result = token_exit_job(model, dataset, samples or 20_000, chosen, settings.batch_size or 16).to_dict()
    result["settings"] = {"model": str(path), "thresholds": list(chosen), "tokens": samples or 20_000}
    for table in exit_rich_tables(result):
        console.print(table)
    write_outputs(json_out, lambda: strict_json(result), markdown, lambda: exit_markdown(result))
