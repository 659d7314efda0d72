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
from ..data.settings import EvalDataSettings
from ..model.evaldata import EvalData, check_fit_data, load_eval_data, load_fit_features
from ..model.laya_model import model_from_checkpoint
from ..model.lm_heads import LayaLM, lm_from_checkpoint
from ..model.settings import LoadSettings
from ..runtime.declare import evolve
from ..runtime.environment import RunSettings
from ..runtime.fileio import check_new_outputs
from ..runtime.memory import MemoryRequest, memory_budget, peak_memory_mb, reset_peak_memory, retry_halving
from .analysis import DepthResult, TruncateResult, run_depth, truncate_model
from .drop_table import DropResult, drop_job, load_drop_data
from .lm_exit import TokenExitResult, token_exit_job
from .settings import DepthSettings
from .truncation import check_k, check_maskable

LM_EXIT_TOKENS = 20_000  # a language model's default --samples: held-out positions of the early-exit sweep


def depth_classifier_checkpoint(
    path,
    ckpt: dict,
    settings: DepthSettings,
    data: EvalDataSettings,
    out: str | Path | None = None,
    run: RunSettings | None = None,
    overwrite: bool = False,
) -> DepthResult | TruncateResult | DropResult:
    """``laya depth``'s job on a classifier's checkpoint (``ckpt``, read from ``path``; the task chose it:
    ``exporting.tasks``): its analysis, truncated or thinned checkpoint (``depth_job``) on its test split (or
    ``data``'s). ``run``: the memory the batches are planned within and the feature cache (None: the batch size as
    given, the cache used); ``overwrite``: replace an existing ``out``."""
    model = model_from_checkpoint(ckpt)
    if settings.drop is not None:
        where = (data.dataset, data.data_dir, data.samples, settings.seed, data.encoding)
        result = depth_job(model, partial(load_drop_data, model, *where), settings, out, overwrite=overwrite)
        result.settings.update({"model": str(path), "samples": data.samples})
        return result
    where = (data.dataset, data.data_dir, data.samples, settings.seed, settings.device)
    use_cache, memory = (True, None) if run is None else (run.cache, run.memory)
    load_data = partial(load_eval_data, model, *where, use_cache=use_cache, encoding=data.encoding)
    result = depth_job(model, load_data, settings, out, use_cache, memory, overwrite)
    if isinstance(getattr(result, "notes", None), list):  # savings measured on a model at chance mean nothing
        result.notes[:0] = checkpoint_flags(ckpt.get("metrics"), len(ckpt.get("classes") or []))
    if settings.truncate is None:
        result.settings.update({"model": str(path), "samples": data.samples, "data_dir": data.data_dir})
    return result


def lm_depth_checkpoint(path, ckpt: dict, settings: DepthSettings, data: EvalDataSettings, load: LoadSettings, **_):
    """``laya depth``'s job on a language model's checkpoint: its early exit per token (``token_depth``)."""
    return token_depth(lm_from_checkpoint(ckpt, load.device_map), settings, data, path)


def token_depth(model: LayaLM, settings: DepthSettings, data: EvalDataSettings, path) -> TokenExitResult:
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
    settings = evolve(settings, thresholds=settings.thresholds_for("classify"))
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
            settings = evolve(settings, batch_size=rows)
            notes.append(f"memory budget {budget.describe()}: batch size {rows}")
    if settings.truncate is not None:
        if out is None:
            raise ValueError("settings.truncate writes a checkpoint: give it an out path")
        return truncate_model(model, data, settings, out, fit_feats)  # rank 0 writes
    halve = _Halver(settings)
    result, retries = retry_halving(lambda: run_depth(model, data, halve.settings, fit_feats), halve)
    result.notes += notes + retries
    if budget is not None:
        result.settings["memory_budget_mb"] = round(budget.total_mb, 1)
        result.settings["peak_memory_mb"] = round(peak_memory_mb(settings.device), 1)
    return result


class _Halver:
    """The ``halve`` of ``retry_halving`` for DepthSettings: the batch halved, as new ``settings``."""

    def __init__(self, settings: DepthSettings):
        self.settings = settings

    def __call__(self) -> str | None:
        if self.settings.batch_size == 1:
            return None
        self.settings = evolve(self.settings, batch_size=self.settings.batch_size // 2)
        return f"batch size {self.settings.batch_size * 2} -> {self.settings.batch_size}"
