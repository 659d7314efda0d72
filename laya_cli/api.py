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

import warnings
from collections.abc import Sequence
from pathlib import Path

from torch import nn

from .auditing.diff.compare import DiffResult
from .auditing.diff.settings import DiffSettings
from .auditing.names import parse_methods
from .auditing.question import ask_models_question, with_question
from .auditing.results import AuditResult
from .auditing.settings import AuditScopeSettings, AuditSettings, compare_for, network_methods
from .depthing.analysis import DepthResult
from .depthing.settings import DepthSettings
from .exporting.folder import Export
from .exporting.settings import ExportSettings
from .exporting.tasks import task_for
from .features.attach import Tapped, attach
from .features.loaders import Loader
from .model.checkpoint import read_checkpoint
from .model.evaldata import EvalData
from .model.laya_model import LayaModel
from .model.lm_heads import LayaLM
from .model.settings import HeadSettings
from .runtime import progress as _progress
from .runtime.declare import Use, build, refuse_other_task, takes_settings
from .runtime.device import resolved
from .runtime.errors import LayaError, LayaWarning, match_choice
from .training.job import near_chance_note
from .training.settings import TASKS, LMSettings, TrainingSettings, TrainJobSettings

__all__ = ["Tapped", "attach", "fit", "audit", "export", "depth", "diff", "load"]

# What ``laya depth`` alone takes: the --samples subset's seed (a loader is its own subset) and the options that
# write a checkpoint or read the training data by path.
DEPTH_CLI_ONLY = ("seed", "truncate", "drop", "drop_order", "draws")
Model = LayaModel | LayaLM
Data = Loader | EvalData | str | None  # a classifier's loader; a language model's text:PATH (None: its own)


# --------------------------------------------------------------------------- fit


@takes_settings(
    HeadSettings,
    Use(TrainingSettings, defaults={"batch_size": None, "device": "auto"}),
    LMSettings,
    # --task and --cache as the command line takes them; the cache off by default: the caller's loaders
    Use(TrainJobSettings, only=("task", "cache"), defaults={"cache": False}),
)
def fit(
    tapped: Tapped | nn.Module | str,
    train_loader: Loader | str,
    val_loader: Loader | None = None,
    head: str = "laya",
    frozen: bool = True,
    *,
    test_loader: Loader | None = None,
    val_fraction: float = 0.1,
    classes: Sequence[str] | None = None,
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
        head: ``"laya"``, or a baseline: ``"last"``, ``"concat"``, ``"scalarmix"`` (``laya train --head``).
        frozen: True: the backbone is not trained (its features are extracted once); False: it
            is trained end to end with the head (in place), from the loaders read into memory once
            (``laya train --frozen``/``--finetune``).
        test_loader: the same for a test split: its accuracy and macro-F1 go into ``model.checkpoint["metrics"]``
            as ``laya train`` records them (None: no test metrics).
        val_fraction: the share of training samples held out when there is no ``val_loader``.
        classes: class names in label order; None: ``train_loader.dataset.classes`` if it has
            them, else ``"0"``, ``"1"``, …
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya train``'s head and training, by its option's name (listed below):
            ``task`` ``"classify"`` (your loaders' classes) or ``"lm"`` (a language model's next token);
            ``batch_size`` None takes the train loader's (else 128), ``device`` "auto" CUDA where available;
            ``seed`` seeds the loaders' shuffling, the validation split, the head's initialisation and the order;
            ``cache`` (``--cache``, off here): frozen features are held in memory only, or (True) also written to
            the on-disk feature cache (``$LAYA_CACHE_DIR``) and reused next time, keyed by the backbone's weights
            and the content of every sample (a loader with random transforms is not cached).
            A setting of the other task (a language model's ``objective`` for a classifier) is refused.

    Returns:
        The trained ``LayaModel`` (``task="lm"``: a ``LayaLM``). ``model.save("model.pt")`` writes the checkpoint
        ``laya train`` writes; ``model.checkpoint["history"]`` holds the epochs. A fit whose best validation
        accuracy is within noise of chance (1/classes) warns (``LayaWarning``).

    Raises:
        LayaError: an invalid option, or a loader that does not yield (images, labels) batches.
    """
    use_cache = _cache_switch(settings.pop("cache"))
    task = task_for(match_choice("task", settings.pop("task"), TASKS))
    options = {"val_loader": val_loader, "test_loader": test_loader, "classes": classes, "head": head,
               "frozen": frozen, "cache": use_cache, "val_fraction": val_fraction}  # fmt: skip
    with _progress.enabled(progress):
        model = task.fit(tapped, train_loader, settings, options)
    _warn([near_chance_note(model.checkpoint)])
    return model


# What laya_cli.audit's scope and ablation do when left None (laya audit's flags default the same way)
_QUESTION_HELP = {
    "scope": "Where a layer is removed: head (at the head's inputs: direct effects), network (patched inside the "
    "backbone, later layers see it: total effects) or both (and their comparison). None: the question the model's "
    "checkpoint records its α was trained on, as laya audit asks it (laya info says it; head, with mean removal, for "
    "a model without a training record).",
    "ablation": "How a layer is removed: mean (r_i := training mean), zero, or mask (α_i := 0; laya/scalarmix heads); "
    "at network scope also bypass (a block's output := its input) or mean-update (input + its mean update). None: "
    "the removal of the checkpoint's question (a scope given alone keeps it where that scope removes inside the "
    "network, else mean), as laya audit.",
}


def _warn(notes) -> None:
    """Notes a command prints as ``note:``/``warning:`` lines, raised as Python warnings (``LayaWarning``) at the
    caller of the API function."""
    for note in notes:
        if note:
            warnings.warn(note.removeprefix("warning: "), LayaWarning, stacklevel=_outside_laya())


def _outside_laya() -> int:
    """The ``stacklevel`` of the first frame outside this package: the user's line, whatever wraps the API call."""
    import sys

    package = str(Path(__file__).resolve().parent)
    frame, level = sys._getframe(1), 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _cache_switch(cache) -> bool:
    """``cache`` means what ``laya train --cache`` means: the on-disk feature cache, on or off. The words it took
    before (where frozen features are held) are refused in one line naming the switch that says the same."""
    if isinstance(cache, str) and cache.strip().lower() in ("memory", "disk"):
        disk = cache.strip().lower() == "disk"
        raise LayaError(
            f"cache={cache!r}: cache is now a switch, as --cache on the command line: cache={disk} "
            f"{'uses' if disk else 'skips'} the on-disk feature cache"
        )
    if not isinstance(cache, bool):
        raise LayaError(f"cache is a switch (--cache: the on-disk feature cache), True or False, got {cache!r}")
    return cache


# --------------------------------------------------------------------------- audit and export


# scope and ablation None: the checkpoint's question, as laya audit asks it (a value given wins)
@takes_settings(
    Use(AuditSettings, defaults={"device": "auto", "ablation": None}, helps={"ablation": _QUESTION_HELP["ablation"]}),
    Use(AuditScopeSettings, skip=("compare",), defaults={"scope": None}, helps={"scope": _QUESTION_HELP["scope"]}),
)
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
            audit`` passes its prepared test split here.) None: the test split of the data set the checkpoint was
            trained on (a ``laya train`` checkpoint's, as ``laya audit MODEL`` reads it; one fitted on your own
            loaders has none to read: pass a loader). A language model: ``text:PATH``, or None for the held-out
            text it was trained with; every position is a sample.
        compare: methods to compare with ``laya`` and ``random`` (always audited): ``"ig"``, ``"gradxact"``,
            ``"atp"``, ``"saliency"``, ``"contrib"``, ``"global"``, ``"all"``; a comma string or a sequence. None:
            the scope's default (``ig,gradxact`` at head scope, ``gradxact,atp`` at network scope, all three for
            both, IG at the head scope only: a network-scope IG runs where ``compare`` names it).
        samples: a language model's held-out positions audited (default 2,000); a classifier's subset is the
            loader.
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya audit``'s audit and scope, by its option's name (listed below);
            ``metrics`` a comma string or a sequence, ``device`` "auto" CUDA where available. ``scope`` and
            ``ablation`` left None ask the question the model's checkpoint records its α was trained on, as ``laya
            audit`` does (a value given wins); the network scope's results are in ``result.network`` and
            ``result.summary["network"]`` (``to_pandas()``: the head scope's rows, the network's where only it ran;
            ``per_sample()``: the head's).

    Returns:
        An ``AuditResult``: ``.summary`` (the dict of ``laya audit --json``), ``.to_pandas()`` (a row per method),
        ``.per_sample()`` (a row per sample: index, label, predicted, target, Δ per layer, per method ρ, D@1, scores).
        The audit's notes (an α collapse, a degenerate faithfulness, a model near chance) are in
        ``.summary["notes"]``, in the frame's ``note`` column, and raised as ``LayaWarning``s.

    Raises:
        LayaError: an unknown method or setting, a removal (--ablation) the head cannot do, taps the network
            scope cannot patch, or a bad loader.
    """
    settings = ask_models_question(getattr(model, "checkpoint", None), settings)  # scope/ablation None: its question
    scope = build(AuditScopeSettings, settings).scope
    methods = parse_methods(compare_for(compare, scope) if compare is None or isinstance(compare, str) else compare)
    audited = resolved(build(AuditSettings, settings))
    network = network_methods(methods, compare is not None)  # IG, a reference there, only when named
    with _progress.enabled(progress):
        result = task_for(model).audit(model, loader, methods, audited, scope, samples, network)
    result = with_question(result, getattr(model, "checkpoint", None))  # said in its JSON, verdict and card
    _warn([*result.notes, *(result.network.notes if result.network is not None else [])])
    return result


# The --samples subset's seed and the files an export attaches or writes by path are the command line's.
@takes_settings(Use(ExportSettings, skip=("seed", "audit", "depth", "model_card"), defaults={"device": "auto"}))
def export(
    model: Model,
    loader: Data = None,
    out: str | Path | None = None,
    *,
    samples: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **settings,
) -> Export:
    """Per-sample layer attention, class × layer profiles and the attention-shift ranking (``laya export``).

    Args:
        model: a ``LayaModel``, or a language model's ``LayaLM`` (α per token: ``.table`` one row per token).
        loader: yields ``(images, labels)``; every sample is exported, in the loader's order. None: the test split
            of the data set the checkpoint was trained on (as ``audit``; one fitted on your own loaders has none to
            read: pass a loader). A language model: ``text:PATH``, or None for its held-out text.
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
        An ``Export`` of DataFrames; ``.kind`` says what its tables hold. A classifier's (``"classes"``):
        ``.table`` (one row per sample: index, label, predicted, p_pred, ``alpha[<layer>]``,
        ``contrib[<layer>]``), ``.profiles`` (class × layer, long), ``.global_profile``, ``.shift`` (classes
        ranked by attention shift). A language model's (``"tokens"``): ``.table`` (one row per held-out position:
        block, position, token, next token, prediction, ``alpha[<layer>]``), ``.mean_alpha``. Either: ``.files``
        written.

    Raises:
        LayaError: a bad format, an ``out`` that is not empty nor a previous export, or a bad loader.
    """
    chosen = resolved(build(ExportSettings, settings))
    with _progress.enabled(progress):
        return task_for(model).export(model, loader, out, chosen, samples, overwrite)


# --------------------------------------------------------------------------- depth


@takes_settings(Use(DepthSettings, skip=DEPTH_CLI_ONLY, defaults={"device": "auto"}))
def depth(
    model: Model, loader: Data = None, *, samples: int | None = None, progress: bool = True, **settings
) -> DepthResult:
    """How deep must the model be (``laya depth``): accuracy when cut after each tap, compute, early exit.

    For every depth k: the accuracy of the model cut after tap k (α masked above k and renormalised;
    heads with α), the backbone FLOPs and wall time up to tap k, early-exit threshold sweeps with
    their cheapest operating points, and the per-sample minimal sufficient depth (docs/depth.md). A language
    model's: its early exit per token (``loader``: ``text:PATH`` or None; ``samples`` positions, default 20,000).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``), or a language model's ``LayaLM``.
        loader: yields ``(images, labels)`` as the model was trained on; every sample is analysed. None: the test
            split of the data set the checkpoint was trained on (as ``audit``; one fitted on your own loaders has
            none to read: pass a loader).
        samples: a language model's held-out positions.
        progress: rich progress bars (False: silent).
        **settings: every setting of ``laya depth``'s analysis by its option's name (listed below; ``refit`` needs
            the training data a ``laya train`` checkpoint records). ``--truncate``, ``--drop`` and their options
            write or read checkpoints and datasets by path: the command line's (``laya depth --drop K``).

    Returns:
        A ``DepthResult``; ``.kind`` says what its tables hold: ``.to_pandas()`` (a classifier's, ``"layers"``:
        the truncation table, one row per depth k; a language model's, ``"tokens"``: the early-exit sweep, one row
        per policy and threshold), ``.to_dict()`` (the JSON ``laya depth --json`` writes). A classifier's also
        ``.truncation``, ``.early_exit``, ``.oracle``, ``.compute``, ``.full``, ``.notes``; a language model's
        ``.points``, ``.best``, ``.oracle``, ``.goals``.

    Raises:
        LayaError: a head without α and no ``refit``, a threshold outside (0, 1], ``refit`` for a
            model trained from your own DataLoader, or a bad loader.
    """
    analysis = resolved(build(DepthSettings, settings))
    with _progress.enabled(progress):
        return task_for(model).depth(model, loader, analysis, samples)


@takes_settings(Use(DiffSettings, defaults={"device": "auto"}))
def diff(
    model_a: Model, model_b: Model, loader: Data = None, *, samples: int | None = None, progress: bool = True,
    **settings,
) -> DiffResult:  # fmt: skip
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
        class × layer picture of the change. Two language models: ``kind`` ``"tokens"``, ``.to_dict()`` their
        JSON document (per method, layer and position in the block).

    Raises:
        LayaError: models with other taps or classes, a bad setting, or a bad loader.
    """
    chosen = resolved(build(DiffSettings, settings))
    task, other = task_for(model_a), task_for(model_b)
    if task is not other:
        raise LayaError("laya diff compares two language models or two classifiers, not one of each")
    refuse_other_task(chosen, task.name)
    with _progress.enabled(progress):
        return task.diff((model_a, model_b), loader, chosen, samples)


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
    return task_for(ckpt).load(ckpt, backbone=backbone)
