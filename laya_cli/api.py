"""The Python API (``laya_cli.attach/fit/audit/export/depth/diff/load``): your model, your DataLoaders, DataFrames
back; or a language model by its folder and a text corpus, as on the command line.

A façade: each function checks its arguments (the command line's one-line messages, as ``LayaError``) and
calls the job the command runs — ``features.attach`` (the taps ``laya train`` chooses), ``training.job`` (the
training job of ``laya train``), ``auditing.job`` and ``depthing.job`` (``laya audit``, ``laya depth``),
``exporting`` and ``auditing.diff`` (``laya export``, ``laya diff``) and the checkpoint (``LayaModel.save``,
``LayaLM.save``, ``load``) — with the settings objects the commands build, from the same declarations, so the
two cannot drift. The task is the model's: a ``LayaModel`` is a classifier, a ``LayaLM`` a language model's heads
(``fit(..., task="lm")``, or ``load`` of a ``--task lm`` checkpoint). Documented in docs/api.md, which quotes these
docstrings. Nothing prints except rich progress bars (and cache status lines) while ``progress=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from torch import nn

from .auditing.diff.compare import DiffResult
from .auditing.diff.settings import DiffSettings
from .auditing.job import audit_job
from .auditing.lm import TOKENS_AUDITED, token_audit_job
from .auditing.names import parse_methods, parse_metric_groups
from .auditing.question import with_question
from .auditing.results import AuditResult
from .auditing.settings import AuditRequest, AuditSettings, compare_for
from .data.settings import EvalRequest
from .depthing.analysis import DepthResult
from .depthing.job import depth_job, token_depth
from .depthing.lm_exit import TokenExitResult
from .depthing.settings import DepthSettings
from .exporting.folder import Export, check_format, check_out_dir, export_data
from .exporting.lm import (
    TOKENS_EXPORTED,
    TokenExport,
    compute_token_export,
    default_token_format,
    write_token_export,
)
from .exporting.settings import ExportSettings
from .features.attach import Tapped, attach
from .features.loaders import Loader
from .model.checkpoint import checkpoint_task, read_checkpoint
from .model.evaldata import EvalData, loader_eval_data
from .model.heads import HEADS
from .model.laya_model import LayaModel, model_from_checkpoint
from .model.lm_heads import LayaLM, lm_from_checkpoint
from .model.settings import HeadConfig, LoadSettings
from .runtime import progress as _progress
from .runtime.declare import build, refuse_other_task, takes_settings
from .runtime.device import resolve_device
from .runtime.errors import LayaError, match_choice
from .training.job import fit_loaders, train
from .training.settings import TASKS, LMSettings, TrainConfig, TrainRequest, check_alpha_options

__all__ = ["Tapped", "attach", "fit", "audit", "export", "depth", "diff", "load"]

TRAIN = TrainConfig()
CACHES = ("memory", "disk")
# What ``laya depth`` alone takes: the --samples subset's seed (a loader is its own subset) and the options that
# write a checkpoint or read the training data by path.
DEPTH_CLI_ONLY = ("seed", "truncate", "drop", "drop_order", "draws")
Model = LayaModel | LayaLM
Data = Loader | EvalData | str | None  # a classifier's loader; a language model's text:PATH (None: its own)


# --------------------------------------------------------------------------- fit


@takes_settings(HeadConfig, TrainConfig, LMSettings, defaults={"batch_size": None, "device": "auto"})
def fit(
    tapped: Tapped | nn.Module | str,
    train_loader: Loader | str,
    val_loader: Loader | None = None,
    head: str = "laya",
    frozen: bool = True,
    *,
    task: str = "classify",
    test_loader: Loader | None = None,
    val_fraction: float = 0.1,
    classes: Sequence[str] | None = None,
    cache: str = "memory",
    progress: bool = True,
    **settings,
) -> Model:
    """Train a head on a tapped model from your own DataLoaders, or a language model's heads: the training job of
    ``laya train``.

    Adam, early stopping on validation accuracy (best weights restored), seeded. A frozen backbone
    is run over each loader once and the head trains on those features for every epoch. The same seed
    and options on the same samples give the checkpoint ``laya train`` writes.

    A language model (``task="lm"``) is named as on the command line, ``fit("hf:PATH", "text:PATH", task="lm")``:
    its LAYA head and tuned lens are trained at every position of the text's blocks (``laya train --task lm``,
    docs/lm.md), the model itself frozen and recorded by name and SHA-256 (never copied into the checkpoint).

    Args:
        tapped: what ``attach`` returned (a plain ``nn.Module`` is attached with the defaults); ``task="lm"``: the
            causal language model as ``laya train --backbone`` names it (``hf:PATH``).
        train_loader: yields ``(images, labels)``: B×C×H×W float tensors, already transformed as
            the model wants them, and integer class labels 0..C-1; ``task="lm"``: the corpus, ``text:PATH``.
        val_loader: the same for early stopping; None: a stratified ``val_fraction`` of the
            training samples, drawn with ``seed`` (as ``laya train`` does).
        head: ``"laya"``, or a baseline: ``"last"``, ``"concat"``, ``"scalarmix"``.
        frozen: True: the backbone is not trained (its features are extracted once); False: it
            is trained end to end with the head (in place), from the loaders read into memory once.
        task: ``"classify"`` (your loaders' classes) or ``"lm"`` (a language model's next token).
        test_loader: the same for a test split: its accuracy and macro-F1 go into ``model.checkpoint["metrics"]``
            as ``laya train`` records them (None: no test metrics).
        val_fraction: the share of training samples held out when there is no ``val_loader``.
        classes: class names in label order; None: ``train_loader.dataset.classes`` if it has
            them, else ``"0"``, ``"1"``, …
        cache: frozen features are held in ``"memory"``, or also written to the on-disk feature
            cache (``"disk"``, ``$LAYA_CACHE_DIR``) and reused next time, keyed by the backbone's
            weights and the content of every sample (a loader with random transforms is not cached).
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya train``'s head and training, by its option's name (listed below):
            ``batch_size`` None takes the train loader's (else 128), ``device`` "auto" CUDA where available;
            ``seed`` seeds the loaders' shuffling, the validation split, the head's initialisation and the order.
            A setting of the other task (a language model's ``objective`` for a classifier) is refused.

    Returns:
        The trained ``LayaModel`` (``task="lm"``: a ``LayaLM``). ``model.save("model.pt")`` writes the checkpoint
        ``laya train`` writes; ``model.checkpoint["history"]`` holds the epochs.

    Raises:
        LayaError: an invalid option, or a loader that does not yield (images, labels) batches.
    """
    if match_choice("task", task, TASKS) == "lm":
        extra = {"val_loader": val_loader, "test_loader": test_loader, "classes": classes}
        return _fit_language_model(tapped, train_loader, settings, progress, extra, (head, frozen, cache))
    head_cfg = build(HeadConfig, settings).validate()
    for given in (head_cfg, build(LMSettings, settings)):
        refuse_other_task(given, "classify")
    tapped = tapped if isinstance(tapped, Tapped) else attach(tapped)
    head = match_choice("head", head, HEADS)  # case-insensitive, as on the command line
    match_choice("cache", cache, CACHES)
    if val_loader is None and not 0 < val_fraction < 1:
        raise LayaError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    batch_size = settings["batch_size"] or getattr(train_loader, "batch_size", None) or TRAIN.batch_size
    cfg = build(TrainConfig, settings, batch_size=batch_size, device=resolve_device(settings["device"])).validate()
    check_alpha_options(cfg, head)
    loaders = {"train": train_loader, "val": val_loader, "test": test_loader}
    with _progress.enabled(progress):
        return fit_loaders(tapped, loaders, head, head_cfg, cfg, frozen, val_fraction, classes, cache)


def _fit_language_model(model, text, settings: dict, progress: bool, extra: dict, classifier: tuple) -> LayaLM:
    """``fit(..., task="lm")``: the request ``laya train --task lm`` builds from the same settings, trained by the
    same job; nothing is written until ``LayaLM.save``."""
    if not isinstance(model, str) or not isinstance(text, str):
        raise LayaError('a language model is named as on the command line: fit("hf:PATH", "text:PATH", task="lm")')
    given = [name for name, value in extra.items() if value is not None]
    given += [name for name, value, default in zip(("head", "frozen", "cache"), classifier, ("laya", True, "memory"))
              if value != default]  # fmt: skip
    if given:
        raise LayaError(f"{', '.join(given)}: a classifier's (a language model's heads train on its text)")
    values = {k: v for k, v in settings.items() if v is not None or k != "batch_size"}  # None: the paper's 128
    req = build(TrainRequest, {**values, "backbone": model, "dataset": text, "task": "lm"}, out="")
    req.train.device = resolve_device(req.train.device)
    with _progress.enabled(progress):
        ckpt = train(req)
    return lm_from_checkpoint(ckpt, req.lm.device_map).to(req.train.device)


# --------------------------------------------------------------------------- audit and export


@takes_settings(AuditSettings, AuditRequest, skip=("compare",), defaults={"device": "auto"})
def audit(
    model: Model,
    loader: Data = None,
    compare: str | Sequence[str] | None = None,
    *,
    samples: int | None = None,
    progress: bool = True,
    **settings,
) -> AuditResult:
    """Audit how faithfully each method's layer attribution explains each prediction (``laya audit``).

    Every sample's layers are removed one at a time (Δ_i = the drop in p_ŷ); each method is scored
    by faithfulness (Spearman ρ between its scores and Δ) and Deletion@1 (docs/metrics.md).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``), or a language model's ``LayaLM``.
        loader: yields ``(images, labels)`` as the model was trained on (a model trained by ``laya train`` takes
            [0, 1] images, as laya's datasets serve them); every sample is audited, in the loader's order. (``laya
            audit`` passes its prepared test split here.) A language model: ``text:PATH``, or None for the held-out
            text it was trained with; every position is a sample.
        compare: methods to compare with ``laya`` and ``random`` (always audited): ``"ig"``, ``"gradxact"``,
            ``"atp"``, ``"saliency"``, ``"contrib"``, ``"global"``, ``"all"``; a comma string or a sequence. None:
            the scope's default (``ig,gradxact`` at head scope, ``gradxact,atp`` at network scope, all three for
            both).
        samples: a language model's held-out positions audited (default 2,000); a classifier's subset is the
            loader.
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya audit``'s audit and scope, by its option's name (listed below);
            ``metrics`` a comma string or a sequence, ``device`` "auto" CUDA where available; ``scope``'s network
            results are in ``result.network`` and ``result.summary["network"]`` (``to_pandas()``, ``per_sample()``:
            the head's).

    Returns:
        An ``AuditResult``: ``.summary`` (the dict of ``laya audit --json``), ``.to_pandas()`` (a row per method),
        ``.per_sample()`` (a row per sample: index, label, predicted, target, Δ per layer, per method ρ, D@1, scores).

    Raises:
        LayaError: an unknown method or setting, a removal (--ablation) the head cannot do, taps the network
            scope cannot patch, or a bad loader.
    """
    scope = build(AuditRequest, settings).validate().scope
    methods = parse_methods(compare_for(compare, scope) if compare is None or isinstance(compare, str) else compare)
    groups, device = tuple(parse_metric_groups(settings["metrics"])), resolve_device(settings["device"])
    audited = build(AuditSettings, settings, metrics=groups, device=device).validate()
    with _progress.enabled(progress):
        if isinstance(model, LayaLM):
            data = _text(loader, samples, TOKENS_AUDITED)
            result = token_audit_job(model.to(device), methods, audited, scope, data.dataset, data.samples)
            return with_question(result, model.ckpt)
        _no_samples(samples)
        data = partial(loader_eval_data, model, loader, audited.device, scope != "head")  # the network runs on images
        return with_question(audit_job(model, data, methods, audited, scope), getattr(model, "checkpoint", None))


def _text(loader, samples: int | None, default: int) -> EvalRequest:
    """A language model's data as ``laya audit``/``depth``/``export`` read it: its held-out text (or ``text:PATH``),
    ``samples`` positions (``default`` when None)."""
    if loader is not None and not isinstance(loader, str):
        raise LayaError("a language model reads text: give text:PATH, or None for the text it was trained with")
    if samples is not None and samples < 1:
        raise LayaError(f"samples must be at least 1, got {samples}")
    return EvalRequest(samples=samples or default, dataset=loader).validate()


def _no_samples(samples: int | None) -> None:
    if samples is not None:
        raise LayaError("samples: a classifier is read from the loader you give (take a subset there)")


@takes_settings(ExportSettings, defaults={"device": "auto"})
def export(
    model: Model,
    loader: Data = None,
    out: str | Path | None = None,
    *,
    samples: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **settings,
) -> Export | TokenExport:
    """Per-sample layer attention, class × layer profiles and the attention-shift ranking (``laya export``).

    Args:
        model: a ``LayaModel``, or a language model's ``LayaLM`` (α per token: ``.table`` one row per token).
        loader: yields ``(images, labels)``; every sample is exported, in the loader's order. A language model:
            ``text:PATH``, or None for its held-out text.
        out: a folder to write the files of ``laya export`` to (tables, PNG plots, report.html),
            atomically; None: nothing is written.
        samples: a language model's held-out positions (default 2,000).
        overwrite: replace ``out`` if it holds a previous laya export (never any other folder).
        progress: rich progress bars (False: silent).
        **settings: ``laya export``'s settings by their option names (listed below): ``format`` of the per-sample
            table with ``out`` (``"csv"``, ``"parquet"`` or ``"npz"``; a language model's csv or parquet),
            ``plots`` (the PNG figures), ``strip`` (how many samples the image strip shows), ``device``. Default
            format: csv (a language model's: parquet where pyarrow is installed).

    Returns:
        An ``Export`` of DataFrames: ``.table`` (one row per sample: index, label, predicted,
        p_pred, ``alpha[<layer>]``, ``contrib[<layer>]``), ``.profiles`` (class × layer, long),
        ``.global_profile``, ``.shift`` (classes ranked by attention shift); ``.files`` written.

    Raises:
        LayaError: a bad format, an ``out`` that is not empty nor a previous export, or a bad loader.
    """
    chosen = build(ExportSettings, settings).validate()
    dev = resolve_device(chosen.device)
    with _progress.enabled(progress):
        if isinstance(model, LayaLM):
            refuse_other_task(chosen, "lm")
            data = _text(loader, samples, TOKENS_EXPORTED)
            exp = compute_token_export(model.to(dev), data.dataset, data.samples)
            fmt = chosen.format or default_token_format()
            return exp if out is None else write_token_export(exp, out, fmt, chosen.plots, overwrite)
        _no_samples(samples)
        fmt = chosen.format or "csv"
        if out is not None:
            check_format(fmt)
            check_out_dir(out, overwrite)
        keep_images = out is not None and chosen.plots and chosen.strip > 0
        data = loader_eval_data(model, loader, dev, keep_images=keep_images)
        info = {"source": "laya_cli.export"}
        return export_data(model, data, out, fmt, chosen.plots, chosen.strip, overwrite, dev, info=info)


# --------------------------------------------------------------------------- depth


@takes_settings(DepthSettings, skip=DEPTH_CLI_ONLY, defaults={"device": "auto"})
def depth(
    model: Model, loader: Data = None, *, samples: int | None = None, progress: bool = True, **settings
) -> DepthResult | TokenExitResult:
    """How deep must the model be (``laya depth``): accuracy when cut after each tap, compute, early exit.

    For every depth k: the accuracy of the model cut after tap k (α masked above k and renormalised;
    heads with α), the backbone FLOPs and wall time up to tap k, early-exit threshold sweeps with
    their cheapest operating points, and the per-sample minimal sufficient depth (docs/depth.md). A language
    model's: its early exit per token (``loader``: ``text:PATH`` or None; ``samples`` positions, default 20,000).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``), or a language model's ``LayaLM``.
        loader: yields ``(images, labels)`` as the model was trained on; every sample is analysed.
        samples: a language model's held-out positions.
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya depth``'s analysis by its option's name (listed below; ``refit`` needs
            the training data a ``laya train`` checkpoint records). ``--truncate``, ``--drop`` and their options
            write or read checkpoints and datasets by path: the command line's (``laya depth --drop K``).

    Returns:
        A ``DepthResult``: ``.to_pandas()`` (the truncation table, one row per depth k),
        ``.to_dict()`` (the JSON ``laya depth --json`` writes), ``.truncation``, ``.early_exit``,
        ``.oracle``, ``.compute``, ``.full``, ``.notes``. A language model's: a ``TokenExitResult``.

    Raises:
        LayaError: a head without α and no ``refit``, a threshold outside (0, 1], ``refit`` for a
            model trained from your own DataLoader, or a bad loader.
    """
    analysis = build(DepthSettings, settings, device=resolve_device(settings["device"])).validate()
    with _progress.enabled(progress):
        if isinstance(model, LayaLM):
            refuse_other_task(analysis, "lm")
            return token_depth(model, analysis, _text(loader, samples, 20_000), "")
        _no_samples(samples)
        return depth_job(model, partial(loader_eval_data, model, loader, analysis.device, keep_images=True), analysis)


@takes_settings(DiffSettings, defaults={"device": "auto"})
def diff(
    model_a: Model, model_b: Model, loader: Data = None, *, samples: int | None = None, progress: bool = True,
    **settings,
) -> DiffResult | dict:  # fmt: skip
    """What changed between two versions of a model (``laya diff``), on the same samples: per class and layer
    the change of α, of the LOLO effects Δ and of contrib, a paired permutation test per class (corrected over
    the classes) and McNemar's test of the accuracy change (docs/audit.md, "laya diff"). Two language models:
    per token, the change of each method's faithfulness and Deletion@1 with paired intervals (the JSON document
    ``laya diff --json`` writes).

    Args:
        model_a: the baseline ``LayaModel`` (A), or a language model's ``LayaLM``.
        model_b: the candidate (B): the same taps and classes (or the same language model's taps and text).
        loader: yields ``(images, labels)``; both models see every sample, in its order. Language models:
            ``text:PATH`` or None (their held-out text).
        samples: language models' held-out positions (default 2,000).
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya diff`` by its option's name (listed below).

    Returns:
        A ``DiffResult``: ``.to_dict()`` (the JSON ``laya diff --json`` writes), ``.changed`` (the classes
        that changed), ``.classes``, ``.overall``, ``.accuracy``; shown in a notebook as its tables and the
        class × layer picture of the change. Two language models: the JSON document (a dict).

    Raises:
        LayaError: models with other taps or classes, a bad setting, or a bad loader.
    """
    from .auditing.diff.job import check_comparable, check_diff, compare_models
    from .auditing.diff.lm import diff_lm_checkpoints
    from .auditing.settings import Removal

    chosen = build(DiffSettings, settings).validate()
    chosen.device = resolve_device(chosen.device)
    lm = [isinstance(m, LayaLM) for m in (model_a, model_b)]
    if any(lm):
        if not all(lm):
            raise LayaError("laya diff compares two language models or two classifiers, not one of each")
        refuse_other_task(chosen, "lm")
        data, ckpts = _text(loader, samples, TOKENS_AUDITED), (model_a.ckpt, model_b.ckpt)
        with _progress.enabled(progress):
            return diff_lm_checkpoints(ckpts, ("model_a", "model_b"), chosen, data, LoadSettings())
    _no_samples(samples)
    refuse_other_task(chosen, "classify")
    if chosen.scope not in ("head", "network"):
        raise LayaError(f"scope {chosen.scope}: a classifiers' diff takes head or network")
    removal = Removal.parse(chosen.ablation)
    check_comparable(model_a, model_b, "model_a", "model_b")
    check_diff(model_a, model_b, removal, chosen.scope)
    images = chosen.scope != "head"  # the network runs on images
    with _progress.enabled(progress):
        data_a, data_b = (loader_eval_data(m, loader, chosen.device, images) for m in (model_a, model_b))
        return compare_models(model_a, model_b, data_a, data_b, chosen, removal, chosen.device, chosen.scope)


# --------------------------------------------------------------------------- load


def load(path: str | Path, backbone: nn.Module | None = None) -> Model:
    """Load a checkpoint written by ``laya train`` or ``LayaModel.save`` (safely: ``weights_only``).

    Args:
        path: the checkpoint file.
        backbone: for a checkpoint whose backbone is your own class (``laya info`` names it
            ``user:<module>.<class>``), an instance of it to load the stored weights into.

    Returns:
        The ``LayaModel``, in eval mode on the CPU; a ``--task lm`` checkpoint's ``LayaLM`` (its language model
        loaded by name, its SHA-256 checked).

    Raises:
        LayaError: the file is missing, not a laya checkpoint, from a newer laya, inconsistent, or
            needs ``backbone``.
    """
    ckpt = read_checkpoint(path)
    if checkpoint_task(ckpt) == "lm":
        return lm_from_checkpoint(ckpt)
    return model_from_checkpoint(ckpt, backbone)
