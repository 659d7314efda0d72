"""The depth job ``laya depth`` and ``laya_cli.depth`` both run: the checks that need no data, then the data
(and with refit the checkpoint's training features), then the analysis (``run.run_depth``) or, with
``settings.truncate``, the cut checkpoint (``run.truncate_model``), or with ``settings.drop`` the layer-dropping
table and checkpoint (``dropped.drop_job``). Each caller brings its own data (the
command a test split by name, the API a DataLoader), as a callable, so a bad setting fails before any
feature is extracted.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from ..auditing.budget import plan_rows
from ..auditing.flags import checkpoint_flags
from ..data.settings import EvalRequest
from ..model.checkpoint import checkpoint_task, read_checkpoint
from ..model.evaldata import EvalData, check_fit_data, load_eval_data, load_fit_features
from ..model.laya_model import model_from_checkpoint
from ..model.lm_heads import LayaLM, lm_from_checkpoint
from ..model.settings import LoadSettings
from ..runtime.declare import refuse_other_task
from ..runtime.fileio import check_new_outputs
from ..runtime.memory import MemoryRequest, memory_budget, peak_memory_mb, reset_peak_memory, retry_halving
from .analysis import DepthResult, TruncateResult, run_depth, truncate_model
from .drop_table import DropResult, drop_job, load_drop_data
from .lm_exit import TokenExitResult, token_exit_job
from .settings import DepthSettings
from .truncation import check_k, check_maskable

LM_EXIT_TOKENS = 20_000  # a language model's default --samples: held-out positions of the early-exit sweep


def depth_checkpoint(
    path,
    settings: DepthSettings,
    data: EvalRequest,
    load: LoadSettings,
    out: str | Path | None = None,
    on_task: Callable[[str], None] = lambda task: None,
    **job,
) -> DepthResult | TruncateResult | DropResult | TokenExitResult:
    """``laya depth``'s job on a checkpoint file, whichever its task: a classifier's analysis, truncated or thinned
    checkpoint (``depth_job``) on its test split (or ``data``'s), a language model's early exit per token
    (``token_exit.token_exit_job``) on its held-out text. The settings of the other task are refused in one line
    first, and ``on_task(task)`` checks what the caller asks of that task (a plot of a classifier's curve).
    ``job``: ``depth_job``'s ``use_cache``, ``memory`` and ``overwrite``."""
    ckpt = read_checkpoint(path)
    task = checkpoint_task(ckpt)
    for given in (settings, data, load):
        refuse_other_task(given, task)
    on_task(task)
    if task == "lm":
        return token_depth(lm_from_checkpoint(ckpt, load.device_map), settings, data, path)
    model = model_from_checkpoint(ckpt)
    if settings.drop is not None:
        where = (data.dataset, data.data_dir, data.samples, settings.seed, data.encoding)
        result = depth_job(model, partial(load_drop_data, model, *where), settings, out, overwrite=job.get("overwrite"))
        result.settings.update({"model": str(path), "samples": data.samples})
        return result
    where = (data.dataset, data.data_dir, data.samples, settings.seed, settings.device)
    load_data = partial(load_eval_data, model, *where, use_cache=job.get("use_cache", True), encoding=data.encoding)
    result = depth_job(model, load_data, settings, out, **job)
    if isinstance(getattr(result, "notes", None), list):  # savings measured on a model at chance mean nothing
        result.notes[:0] = checkpoint_flags(ckpt.get("metrics"), len(ckpt.get("classes") or []))
    if settings.truncate is None:
        result.settings.update({"model": str(path), "samples": data.samples, "data_dir": data.data_dir})
    return result


def token_depth(model: LayaLM, settings: DepthSettings, data: EvalRequest, path) -> TokenExitResult:
    """A language model's depth: its early exit per token on ``data.samples`` held-out positions (20,000 by
    default)."""
    model.to(settings.device)
    thresholds, tokens = settings.thresholds_for("lm"), data.samples or LM_EXIT_TOKENS
    result = token_exit_job(model, data.dataset, tokens, thresholds, settings.batch_size)
    result.settings = {"model": str(path), "thresholds": list(thresholds), "tokens": tokens}
    if not model.has_tuned_lens:  # --lens logit|none: its untrained translators are the logit lens
        result.lens_note = f"trained with --lens {model.lens}: tuned_p_max reads the logit lens"
    return result


def depth_job(
    model,
    load_data: Callable[[], EvalData],
    settings: DepthSettings,
    out: str | Path | None = None,
    use_cache: bool = True,
    memory: MemoryRequest | None = None,
    overwrite: bool = False,
) -> DepthResult | TruncateResult | DropResult:
    """``laya depth`` on ``model`` (a LayaModel) and ``load_data()`` with validated ``settings``: a
    ``DepthResult``, or with ``settings.truncate`` the ``TruncateResult`` of the checkpoint written to ``out``.
    ``use_cache``: the training features of ``settings.refit`` may come from the feature cache. ``memory``:
    ``settings.batch_size`` planned within its budget (unless the user gave it), budget and peak recorded.
    With ``settings.drop``, ``load_data`` gives ``dropped.DropData`` and the result is a ``DropResult``. An
    existing ``out`` is refused before any work unless ``overwrite`` (``--overwrite``)."""
    check_new_outputs({"--out": out}, overwrite)
    settings.thresholds = settings.thresholds_for("classify")
    if settings.drop is not None:
        return drop_job(model, load_data, settings, out)
    if settings.truncate is not None:
        check_k(settings.truncate, model.num_layers)
    if settings.refit:
        check_fit_data(model)
    else:
        check_maskable(model.head)  # before any feature extraction
    data = load_data()
    fit_feats = load_fit_features(model, settings.device, use_cache) if settings.refit else None
    notes, budget = [], None
    if memory is not None:
        reset_peak_memory(settings.device)
        budget = memory_budget(memory.max_memory, settings.device)
        rows, _ = plan_rows(model, data, settings.device, budget, settings.batch_size)
        if rows < settings.batch_size and "batch_size" not in memory.given:
            settings.batch_size = rows
            notes.append(f"memory budget {budget.describe()}: batch size {rows}")
    if settings.truncate is not None:
        if out is None:
            raise ValueError("settings.truncate writes a checkpoint: give it an out path")
        return truncate_model(model, data, settings, out, fit_feats)  # rank 0 writes
    result, retries = retry_halving(lambda: run_depth(model, data, settings, fit_feats), _halver(settings))
    result.notes += notes + retries
    if budget is not None:
        result.settings["memory_budget_mb"] = round(budget.total_mb, 1)
        result.settings["peak_memory_mb"] = round(peak_memory_mb(settings.device), 1)
    return result


def _halver(settings: DepthSettings):
    def halve() -> str | None:
        if settings.batch_size == 1:
            return None
        settings.batch_size //= 2
        return f"batch size {settings.batch_size * 2} -> {settings.batch_size}"

    return halve
