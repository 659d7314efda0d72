"""The Python API (``laya_cli.attach/fit/audit/export/depth/load``): your model, your DataLoaders, DataFrames back.

A façade: each function checks its arguments (the command line's one-line messages, as ``LayaError``) and
calls the job the command runs — ``features.attach`` (the taps ``laya train`` chooses), ``training.job`` (the
training job of ``laya train``), ``auditing.job`` and ``depthing.job`` (``laya audit``, ``laya depth``),
``exporting.export_data`` and the checkpoint (``LayaModel.save``, ``model.load_model``) — so the two cannot drift.
Documented in docs/api.md, which quotes these docstrings. Nothing prints except rich progress bars (and cache
status lines) while ``progress=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from torch import nn

from .auditing.diff.compare import DiffResult
from .auditing.job import audit_job
from .auditing.names import parse_methods, parse_metric_groups
from .auditing.results import AuditResult
from .depthing.job import depth_job
from .depthing.run import DepthResult
from .exporting.run import Export, check_format, check_out_dir, export_data
from .features.attach import Tapped, attach
from .features.loaders import Loader
from .model.evaldata import EvalData, loader_eval_data
from .model.heads import HEADS
from .model.laya_model import LayaModel, load_model
from .runtime import progress as _progress
from .runtime.config import (
    HEAD_ABLATIONS,
    AuditSettings,
    DepthSettings,
    HeadConfig,
    Removal,
    ScopeSettings,
    TrainConfig,
    check_alpha_options,
    check_at_least,
    check_choice,
)
from .runtime.device import resolve_device
from .runtime.errors import LayaError, match_choice
from .runtime.fields import build, takes_settings
from .training.job import fit_loaders

__all__ = ["Tapped", "attach", "fit", "audit", "export", "depth", "diff", "load"]

TRAIN = TrainConfig()
CACHES = ("memory", "disk")
# What ``laya depth`` alone takes: the --samples subset's seed (a loader is its own subset) and the options that
# write a checkpoint or read the training data by path.
DEPTH_CLI_ONLY = ("seed", "truncate", "drop", "drop_order", "draws")


# --------------------------------------------------------------------------- fit


@takes_settings(HeadConfig, TrainConfig, defaults={"batch_size": None, "device": "auto"})
def fit(
    tapped: Tapped | nn.Module,
    train_loader: Loader,
    val_loader: Loader | None = None,
    head: str = "laya",
    frozen: bool = True,
    *,
    test_loader: Loader | None = None,
    val_fraction: float = 0.1,
    classes: Sequence[str] | None = None,
    cache: str = "memory",
    progress: bool = True,
    **settings,
) -> LayaModel:
    """Train a head on a tapped model from your own DataLoaders: the training job of ``laya train``.

    Adam, early stopping on validation accuracy (best weights restored), seeded. A frozen backbone
    is run over each loader once and the head trains on those features for every epoch. The same seed
    and options on the same samples give the checkpoint ``laya train`` writes.

    Args:
        tapped: what ``attach`` returned (a plain ``nn.Module`` is attached with the defaults).
        train_loader: yields ``(images, labels)``: B×C×H×W float tensors, already transformed as
            the model wants them, and integer class labels 0..C-1.
        val_loader: the same for early stopping; None: a stratified ``val_fraction`` of the
            training samples, drawn with ``seed`` (as ``laya train`` does).
        head: ``"laya"``, or a baseline: ``"last"``, ``"concat"``, ``"scalarmix"``.
        frozen: True: the backbone is not trained (its features are extracted once); False: it
            is trained end to end with the head (in place), from the loaders read into memory once.
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

    Returns:
        The trained ``LayaModel``. ``model.save("model.pt")`` writes the checkpoint ``laya train``
        writes; ``model.checkpoint["history"]`` holds the epochs.

    Raises:
        LayaError: an invalid option, or a loader that does not yield (images, labels) batches.
    """
    tapped = tapped if isinstance(tapped, Tapped) else attach(tapped)
    head = match_choice("head", head, HEADS)  # case-insensitive, as on the command line
    check_choice("cache", cache, CACHES)
    if val_loader is None and not 0 < val_fraction < 1:
        raise LayaError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    head_cfg = build(HeadConfig, settings).validate()
    batch_size = settings["batch_size"] or getattr(train_loader, "batch_size", None) or TRAIN.batch_size
    cfg = build(TrainConfig, settings, batch_size=batch_size, device=resolve_device(settings["device"])).validate()
    check_alpha_options(cfg, head)
    loaders = {"train": train_loader, "val": val_loader, "test": test_loader}
    with _progress.enabled(progress):
        return fit_loaders(tapped, loaders, head, head_cfg, cfg, frozen, val_fraction, classes, cache)


# --------------------------------------------------------------------------- audit and export


@takes_settings(AuditSettings, ScopeSettings, defaults={"device": "auto"})
def audit(
    model: LayaModel,
    loader: Loader | EvalData,
    compare: str | Sequence[str] = ("ig", "gradxact"),
    *,
    progress: bool = True,
    **settings,
) -> AuditResult:
    """Audit how faithfully each method's layer attribution explains each prediction (``laya audit``).

    Every sample's layers are removed one at a time (Δ_i = the drop in p_ŷ); each method is scored
    by faithfulness (Spearman ρ between its scores and Δ) and Deletion@1 (docs/metrics.md).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``).
        loader: yields ``(images, labels)`` as the model was trained on (a model trained by ``laya train`` takes
            [0, 1] images, as laya's datasets serve them); every sample is audited, in the loader's order. (``laya
            audit`` passes its prepared test split here.)
        compare: methods to compare with ``laya`` and ``random`` (always audited): ``"ig"``, ``"gradxact"``,
            ``"atp"``, ``"saliency"``, ``"contrib"``, ``"global"``, ``"all"``; a comma string or a sequence.
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya audit``'s audit and scope, by its option's name (listed below);
            ``metrics`` a comma string or a sequence, ``device`` "auto" CUDA where available; ``scope``'s network
            results are in ``result.network`` and ``result.summary["network"]`` (``to_pandas()``, ``per_sample()``:
            the head's).

    Returns:
        An ``AuditResult``: ``.summary`` (the dict of ``laya audit --json``), ``.to_pandas()`` (a row per method),
        ``.per_sample()`` (a row per sample: index, label, predicted, target, Δ per layer, per method ρ, D@1, scores).

    Raises:
        LayaError: an unknown method or setting, an ablation the head cannot do, taps the network
            scope cannot patch, or a bad loader.
    """
    methods, scope = parse_methods(compare), build(ScopeSettings, settings).validate().scope
    groups, device = tuple(parse_metric_groups(settings["metrics"])), resolve_device(settings["device"])
    audited = build(AuditSettings, settings, metrics=groups, device=device).validate()
    data = partial(loader_eval_data, model, loader, audited.device, scope != "head")  # the network runs on images
    with _progress.enabled(progress):
        return audit_job(model, data, methods, audited, scope)


def export(
    model: LayaModel,
    loader: Loader | EvalData,
    out: str | Path | None = None,
    *,
    format: str = "csv",
    plots: bool = True,
    strip: int = 8,
    overwrite: bool = False,
    device: str = "auto",
    progress: bool = True,
) -> Export:
    """Per-sample layer attention, class × layer profiles and the attention-shift ranking (``laya export``).

    Args:
        model: a ``LayaModel``.
        loader: yields ``(images, labels)``; every sample is exported, in the loader's order.
        out: a folder to write the files of ``laya export`` to (tables, PNG plots, report.html),
            atomically; None: nothing is written.
        format: per-sample table file format with ``out``: ``"csv"``, ``"parquet"`` or ``"npz"``.
        plots: draw the PNG figures (with ``out``).
        strip: how many samples the image strip shows (with ``out`` and ``plots``; 0: none).
        overwrite: replace ``out`` if it holds a previous laya export (never any other folder).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``.
        progress: rich progress bars (False: silent).

    Returns:
        An ``Export`` of DataFrames: ``.table`` (one row per sample: index, label, predicted,
        p_pred, ``alpha[<layer>]``, ``contrib[<layer>]``), ``.profiles`` (class × layer, long),
        ``.global_profile``, ``.shift`` (classes ranked by attention shift); ``.files`` written.

    Raises:
        LayaError: a bad format, an ``out`` that is not empty nor a previous export, or a bad loader.
    """
    dev = resolve_device(device)
    if out is not None:
        check_format(format)
        check_at_least("--strip", strip, 0)
        check_out_dir(out, overwrite)
    with _progress.enabled(progress):
        data = loader_eval_data(model, loader, dev, keep_images=out is not None and plots and strip > 0)
        return export_data(
            model,
            data,
            out,
            fmt=format,
            plots=plots,
            strip=strip,
            overwrite=overwrite,
            device=dev,
            info={"source": "laya_cli.export"},
        )


# --------------------------------------------------------------------------- depth


@takes_settings(DepthSettings, skip=DEPTH_CLI_ONLY, defaults={"device": "auto"})
def depth(model: LayaModel, loader: Loader | EvalData, *, progress: bool = True, **settings) -> DepthResult:
    """How deep must the model be (``laya depth``): accuracy when cut after each tap, compute, early exit.

    For every depth k: the accuracy of the model cut after tap k (α masked above k and renormalised;
    heads with α), the backbone FLOPs and wall time up to tap k, early-exit threshold sweeps with
    their cheapest operating points, and the per-sample minimal sufficient depth (docs/depth.md).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``).
        loader: yields ``(images, labels)`` as the model was trained on; every sample is analysed.
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya depth``'s analysis by its option's name (listed below; ``refit`` needs
            the training data a ``laya train`` checkpoint records). ``--truncate``, ``--drop`` and their options
            write or read checkpoints and datasets by path: the command line's (``laya depth --drop K``).

    Returns:
        A ``DepthResult``: ``.to_pandas()`` (the truncation table, one row per depth k),
        ``.to_dict()`` (the JSON ``laya depth --json`` writes), ``.truncation``, ``.early_exit``,
        ``.oracle``, ``.compute``, ``.full``, ``.notes``.

    Raises:
        LayaError: a head without α and no ``refit``, a threshold outside (0, 1], ``refit`` for a
            model trained from your own DataLoader, or a bad loader.
    """
    analysis = build(DepthSettings, settings, device=resolve_device(settings["device"])).validate()
    with _progress.enabled(progress):
        return depth_job(model, partial(loader_eval_data, model, loader, analysis.device, keep_images=True), analysis)


def diff(
    model_a: LayaModel,
    model_b: LayaModel,
    loader: Loader | EvalData,
    *,
    permutations: int = 1000,
    alpha: float = 0.05,
    correction: str = "holm",
    seed: int = 0,
    ablation: str = "mean",
    device: str = "auto",
    progress: bool = True,
) -> DiffResult:
    """What changed between two versions of a model (``laya diff``), on the same samples: per class and layer
    the change of α, of the LOLO effects Δ and of contrib, a paired permutation test per class (corrected over
    the classes) and McNemar's test of the accuracy change (docs/audit.md, "laya diff"). Head scope.

    Args:
        model_a: the baseline ``LayaModel`` (A).
        model_b: the candidate (B): the same taps and classes.
        loader: yields ``(images, labels)``; both models see every sample, in its order.
        permutations: permutations of each paired permutation test.
        alpha: significance level of a changed class, after correction.
        correction: ``"holm"``, ``"bh"`` or ``"none"``.
        seed: seed of the permutations.
        ablation: how a layer is removed for Δ: ``"mean"``, ``"zero"`` or ``"mask"``.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``.
        progress: rich progress bars (False: silent).

    Returns:
        A ``DiffResult``: ``.to_dict()`` (the JSON ``laya diff --json`` writes), ``.changed`` (the classes
        that changed), ``.classes``, ``.overall``, ``.accuracy``; shown in a notebook as its tables and the
        class × layer picture of the change.

    Raises:
        LayaError: models with other taps or classes, a bad setting, or a bad loader.
    """
    from .auditing.diff.compare import DiffSettings
    from .auditing.diff.job import check_comparable, check_diff, compare_models
    from .stats.multiple import CORRECTIONS

    if permutations < 1 or not 0 < alpha < 1:
        raise LayaError(f"permutations must be >= 1 and alpha in (0, 1), got {permutations} and {alpha}")
    settings = DiffSettings(permutations, alpha, match_choice("correction", correction, CORRECTIONS), seed)
    removal = Removal.parse(match_choice("ablation", ablation, HEAD_ABLATIONS))  # the head scope's: mean|zero|mask
    check_comparable(model_a, model_b, "model_a", "model_b")
    check_diff(model_a, model_b, removal, "head")
    device = resolve_device(device)
    with _progress.enabled(progress):
        data_a, data_b = (loader_eval_data(m, loader, device) for m in (model_a, model_b))
        return compare_models(model_a, model_b, data_a, data_b, settings, removal, device)


# --------------------------------------------------------------------------- load


def load(path: str | Path, backbone: nn.Module | None = None) -> LayaModel:
    """Load a checkpoint written by ``laya train`` or ``LayaModel.save`` (safely: ``weights_only``).

    Args:
        path: the checkpoint file.
        backbone: for a checkpoint whose backbone is your own class (``laya info`` names it
            ``user:<module>.<class>``), an instance of it to load the stored weights into.

    Returns:
        The ``LayaModel``, in eval mode on the CPU.

    Raises:
        LayaError: the file is missing, not a laya checkpoint, from a newer laya, inconsistent, or
            needs ``backbone``.
    """
    return load_model(path, backbone)
