"""The training job: ``laya train`` and ``laya_cli.fit`` both run ``train_model``.

One job, two ways in. ``train`` (the command) reads a dataset's splits and builds the backbone from its
name; ``laya_cli.fit`` (the API) reads the user's DataLoaders and takes the module they attached. From there
the same code trains the head (on the frozen backbone's features, or end to end), predicts the test split
and writes the checkpoint's record, so a model trained either way is the same model (tests/test_train.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .. import backbones as bb
from ..auditing.collapse import collapse_summary
from ..auditing.flags import chance_rate
from ..auditing.metrics import accuracy, macro_f1, near_chance
from ..auditing.question import question_of_training
from ..data.datasets import dataset_name, holds_images, load_dataset
from ..data.text import is_text, tokenize_splits
from ..features.attach import WEIGHTS_SOURCE as ATTACHED_SOURCE
from ..features.attach import Tapped
from ..features.extraction import extract, tap_means, to_float_images
from ..features.loaders import Loader
from ..model.checkpoint import checkpoint_body, save_checkpoint
from ..model.heads import HEADS, build_head, head_kind
from ..model.laya_model import EndToEnd, LayaModel
from ..model.settings import HeadSettings
from ..runtime import distributed
from ..runtime.declare import evolve
from ..runtime.device import check_precision, precision, resolved_precision
from ..runtime.errors import LayaError, TrainingInterrupted, match_choice, sigterm_as_interrupt
from ..runtime.fileio import check_writable
from ..runtime.progress import log, warn
from ..runtime.trust import safe_torch_load
from .alignment import Alignment
from .data import DatasetData, LoaderData, TrainingData, from_store
from .defaults import resolved_alignment, resolved_backbone_lr, resolved_request, without_bypass_default
from .lm import LMEpoch
from .loop import EpochRecord, NonFiniteLoss, StateKept, fit, predict_outputs
from .network_target import network_alignment
from .settings import NETWORK_TARGETS, TrainingSettings, TrainJobSettings, check_alpha_options
from .shaping import AlphaShaping

OnEpoch = Callable[[EpochRecord | LMEpoch], None] | None


@dataclass
class Resumable:
    """Where an interrupted run left its state (beside ``--out``), and what must match to continue it."""

    state_path: Path
    resume: bool
    fingerprint: str
    options: dict


@dataclass
class TrainingJob:
    """Everything a training run needs besides its data."""

    backbone: bb.TappedBackbone
    spec: bb.BackboneSpec  # resolved: taps, pool, formats; ``finetune`` picks the route
    head: str
    head_config: HeadSettings
    train: TrainingSettings
    feature_dtype: str = "float32"  # how frozen features are stored and trained on
    weights_file: str | None = None  # --weights: recorded, and decides whether the weights travel in the file
    resumable: Resumable | None = None  # the command's state file; None: nothing written until the end
    command_line: dict | None = None  # the resolved options the checkpoint records


class TrainedModel(NamedTuple):
    checkpoint: dict  # what ``save_checkpoint`` writes (without its header)
    head: nn.Module  # the trained head (the checkpoint holds copies of its weights)


def train_model(job: TrainingJob, data: TrainingData, on_epoch: OnEpoch = None) -> TrainedModel:
    """Train the job's head on ``data`` and return the checkpoint of the trained model. Backbone passes run at
    ``job.train.precision``, recorded resolved (bf16 or fp32) in the checkpoint's ``train_config``, as are
    ``--align`` and ``--align-target`` (the kind of model's default where not given: ``defaults.py``)."""
    pool = job.spec.pool or ""  # resolved (--pool auto: the family's or the model's own)
    job = replace(job, train=resolved_alignment(job.train, job.spec.name, job.spec.finetune, job.head, pool))
    dev = job.train.device
    recorded: dict = {}  # the removal a network alignment target resolved to (auto: bypass or mean)
    with precision(check_precision(job.train.precision, dev)):
        backbone = job.backbone.to(dev)
        backbone.read_positions = job.head_config.alpha_reader == "positions"  # α's reader: r_i packed with positions
        dims = backbone.dims(to_float_images(data.example()).to(dev))  # one line if the model cannot take these
        if len(dims) < 2 and job.train.exit_aware:  # one tapped layer: no depth to exit at (recorded off)
            job = replace(job, train=replace(job.train, exit_aware=0.0))
        job = replace(job, train=without_bypass_default(job.train, backbone))  # a frozen ResNet: no default term
        # Trained weights: a --weights file, or a source laya loaded (pretrained, a program). A module the API was
        # handed says nothing of its weights: treated as untrained, one rate, unless backbone_lr is given.
        source = backbone.weights_source
        known = bool(source) and source != ATTACHED_SOURCE and not source.startswith(bb.RANDOM_START)
        starts_trained = bool(job.weights_file) or known
        job = replace(job, train=resolved_backbone_lr(job.train, job.spec.finetune, starts_trained))
        classes = data.classes  # (a loader's data are read here, before the head's seed)
        torch.manual_seed(job.train.seed)
        head = build_head(job.head, dims, len(classes), job.head_config).to(dev)
        trained = (_end_to_end if job.spec.finetune else _frozen)(job, head, data, on_epoch, recorded)
    metrics = train_metrics(trained.history, trained.n_train, trained.n_val, *trained.test[:2], len(classes))
    # How much of the depth α uses on the test split (docs/metrics.md); None where not measured (no α, no test split)
    config = {**asdict(job.train), **recorded}  # a default term dropped where it could not run: recorded
    against = config["align_target"] if config["align"] else None  # what α was trained to rank
    metrics["alpha_collapse"] = collapse_summary(trained.test[2], against) if len(trained.test) == 3 else None
    ckpt = checkpoint_body(
        backbone=backbone,
        spec=job.spec,
        head=head,
        head_config=job.head_config.to_dict(),
        dims=dims,
        classes=classes,
        dataset=data.record(),
        reference=trained.reference,
        history=[asdict(r) for r in trained.history],
        metrics=metrics,
        train_config={**config, "precision": resolved_precision(dev)},
        # Pretrained frozen weights load by name (checked by SHA-256); everything else travels in the file.
        weights_file=job.weights_file,
        feature_dtype=job.feature_dtype,
        tap_reference=trained.tap_reference,
        options=job.command_line,
    )
    ckpt["question"] = question_of_training(config).record()  # what α was trained to follow (auditing/question.py)
    return TrainedModel(ckpt, head)


class _Trained(NamedTuple):
    """What either route leaves for the checkpoint."""

    history: list[EpochRecord]
    reference: list[Tensor]  # the mean training features: the head-scope reference
    n_train: int
    n_val: int
    test: tuple[Tensor, ...]  # (predictions, labels[, α of a head with one]) of the test split; () without one
    tap_reference: list[Tensor] | None = None  # the network scope's, where the backbone trained too


def _end_to_end(job: TrainingJob, head: nn.Module, data: TrainingData, on_epoch: OnEpoch, recorded: dict) -> _Trained:
    """Backbone and head trained together on the images (``--finetune``, ``fit(frozen=False)``)."""
    dev, backbone = job.train.device, job.backbone
    model = EndToEnd(backbone, head, all_parameters_used=bb.is_builtin(job.spec.name))
    (train_x, train_y), (val_x, val_y) = data.images("train"), data.images("val")
    alignment = _alignment(job, head, None, recorded)
    history = _fit(job, model, ([train_x], train_y), ([val_x], val_y), on_epoch, True, alignment, _shaping(job, head))
    test = data.images("test")
    tested = _tested(model, [test[0]], test[1], dev, head) if test is not None else ()
    reference = extract(backbone, train_x, train_y, device=dev, description="reference").mean()
    # The network-scope reference (docs/checkpoint.md): frozen backbones compute it on first use instead,
    # so that head training from cached features never needs a backbone pass.
    tap_reference = tap_means(backbone, train_x, device=dev, description="tap means")
    return _Trained(history, reference, len(train_y), len(val_y), tested, tap_reference)


def _frozen(job: TrainingJob, head: nn.Module, data: TrainingData, on_epoch: OnEpoch, recorded: dict) -> _Trained:
    """The head alone, on the frozen backbone's features (extracted once, or read from a cache)."""
    for p in job.backbone.parameters():
        p.requires_grad_(False)
    train, val, test = (data.features(job, split) for split in ("train", "val", "test"))
    # In memory: (features, labels); from a sharded store: the StoredFeatures themselves.
    as_inputs = lambda f: f if from_store(f) else (f.feats, f.labels)
    reference = train.mean()  # r̄ once (a store streams every shard for it): the checkpoint's, the terms' below
    alignment = _alignment(job, head, train, recorded, data, reference)
    shaping = _shaping(job, head, reference)
    history = _fit(job, head, as_inputs(train), as_inputs(val), on_epoch, False, alignment, shaping)
    tested = ()
    if test is not None:
        tested = _tested(head, test if from_store(test) else test.feats, test.labels, job.train.device, head)
    return _Trained(history, reference, len(train), len(val), tested)


def _tested(model, inputs, labels: Tensor, device: str, head: nn.Module) -> tuple[Tensor, ...]:
    """(predictions, labels) of the test split, and α (N, L) when the head has one, from one pass."""
    width = len(head.adapters) if getattr(head, "has_alpha", False) else None
    pred, alpha = predict_outputs(model, inputs, device=device, alpha_width=width)
    return (pred, labels) if alpha is None else (pred, labels, alpha)


def _alignment(
    job: TrainingJob, head: nn.Module, fixed_feats, recorded: dict, data=None, reference=None
) -> Alignment | None:
    """``--align λ``: the term with its reference, ``reference`` the mean training features when they are fixed
    (a frozen backbone) and a running mean of the batches when the backbone trains too; against the network-scope
    effects with ``align_target`` "network" (its resolved removal into ``recorded``), against both summed with
    "both"."""
    if not job.train.align:
        return None
    Alignment.check_head(head)
    if job.train.align_target not in NETWORK_TARGETS:
        return _head_alignment(job, reference)
    term = _network_alignment(job, head, fixed_feats, recorded, data)
    if term is not None and job.train.align_target == "both":
        term.head_term = _head_alignment(job, reference)
    return term


def _head_alignment(job: TrainingJob, reference) -> Alignment:
    """The head's own target: r̄ the training mean of fixed features (``reference``), else (None) a running mean of
    the batches."""
    t = job.train
    return Alignment(t.align, reference, scope=t.align_scope, loss=t.align_loss, sharpness=t.align_sharpness)


def _network_alignment(job: TrainingJob, head: nn.Module, fixed_feats, recorded: dict, data) -> Alignment | None:
    """The network target (``network_target.py``); a frozen backbone's removals cached from its training inputs.
    Where it cannot run, a term the caller gave is refused in one line; the kind's default is dropped with a note
    (and the checkpoint records the run as trained without it, and why)."""
    try:
        images = None if fixed_feats is None else _frozen_training_inputs(fixed_feats, data)
        term, removal = network_alignment(
            job.train.align, job.backbone, head, job.train.align_scope, job.train.device, images,
            job.train.align_removal, _feature_dtype(fixed_feats), job.train.batch_size, job.train.seed,
            job.train.align_loss, job.train.align_sharpness,
        )  # fmt: skip
    except LayaError as e:
        if job.train.align_source != "default":
            raise
        why = str(e)
        log(f"note: training without the network alignment term this kind of model gets by default ({why}); "
            "--align 0 says so and silences this")  # fmt: skip
        recorded.update(align=0.0, align_target="head", align_loss="rank", align_sharpness=1.0, align_dropped=why)
        return None
    recorded["align_removal"] = removal
    return term


def _feature_dtype(fixed_feats) -> torch.dtype | None:
    """The dtype a frozen backbone's features are trained on (a store's read back as float32, never all read here)."""
    if fixed_feats is None:
        return None
    return torch.float32 if from_store(fixed_feats) else fixed_feats.feats[0].dtype


def _frozen_training_inputs(fixed_feats, data):
    """The training inputs a frozen backbone's network target caches its removals from, in the features' order (on
    a feature store too: the images may stream, and only the cached rows' are decoded, batch by batch)."""
    got = data.images("train")
    if not isinstance(got, tuple):  # laya_cli.fit reads a frozen backbone's loaders as features only
        raise LayaError(
            "the network alignment target of a frozen backbone needs the training inputs, not only features"
        )
    return got[0]


def _shaping(job: TrainingJob, head: nn.Module, reference=None) -> AlphaShaping | None:
    """``--layer-dropout``, ``--alpha-entropy``, ``--tau-start``, ``--exit-aware`` (``shaping.py``); None when all are
    off. ``reference``: a frozen backbone's training mean, the r̄ ``--exit-aware`` truncates with (None end to end)."""
    if not AlphaShaping.wanted(job.train):
        return None
    check_alpha_options(job.train, head_kind(head))
    return AlphaShaping(job.train, head, reference)


def _fit(
    job: TrainingJob,
    model,
    train,
    val,
    on_epoch: OnEpoch,
    data_parallel: bool,
    alignment: Alignment | None,
    shaping: AlphaShaping | None = None,
) -> list[EpochRecord]:
    """``fit``, with the job's state written after every epoch when it has one (Ctrl-C and SIGTERM then leave
    it resumable)."""
    state = job.resumable
    extra = {"data_parallel": data_parallel, "alignment": alignment, "shaping": shaping}
    if state is None:
        return fit(model, train, val, job.train, on_epoch, **extra)
    done = []

    def record(r: EpochRecord):
        done.append(r)
        if on_epoch:
            on_epoch(r)

    try:
        with sigterm_as_interrupt():
            return fit(
                model,
                train,
                val,
                job.train,
                record,
                state.state_path,
                state.resume,
                state.fingerprint,
                options=state.options,
                **extra,
            )
    except KeyboardInterrupt:
        where = f"after epoch {done[-1].epoch}" if done else "before the first epoch ended"
        hint = (
            f"; run the same command with --resume to continue from {state.state_path}" if done or state.resume else ""
        )
        raise TrainingInterrupted(f"training interrupted {where}{hint}") from None


def _best(history: list[EpochRecord]) -> EpochRecord:
    """The epoch whose weights training restored: the last new best (the first best validation accuracy under the
    default ``--stop-on accuracy``)."""
    return [r for r in history if r.best][-1] if any(r.best for r in history) else history[-1]


def train_metrics(
    history: list[EpochRecord],
    n_train: int,
    n_val: int,
    test_pred: Tensor | None = None,
    test_labels: Tensor | None = None,
    num_classes: int = 0,
) -> dict:
    """A checkpoint's ``metrics``: the test accuracy and macro-F1 (None without a test split), the best validation
    accuracy and its epoch."""
    tested = test_labels is not None
    return {
        "test_accuracy": accuracy(test_pred, test_labels) if tested else None,
        "test_macro_f1": macro_f1(test_pred, test_labels, num_classes) if tested else None,
        "val_accuracy": _best(history).val_accuracy,
        "epochs_run": len(history),
        "best_epoch": _best(history).epoch,
        "n_train": n_train,
        "n_val": n_val,
        "n_test": len(test_labels) if tested else None,
        # the accuracy of guessing on the test split (auditing/flags.py: a model within noise of it is flagged)
        "test_chance": chance_rate(test_labels.tolist(), num_classes) if tested and num_classes else None,
    }


def near_chance_note(ckpt: dict) -> str | None:
    """A warning when the trained classifier's best validation accuracy is within noise of chance (1/C: at most two
    binomial standard errors above it, ``auditing.metrics.near_chance``), else None: the head learnt little, and an
    audit of it would explain nothing worth explaining."""
    metrics, classes = ckpt.get("metrics") or {}, len(ckpt.get("classes") or ())
    acc, n = metrics.get("val_accuracy"), metrics.get("n_val") or 0
    if acc is None or classes < 2 or not near_chance(acc, 1.0 / classes, n):
        return None
    return (
        f"validation accuracy {acc:.3f} on {n:,} samples is within noise of chance (1/{classes} = {1 / classes:.3f}): "
        "the head learnt little. Try more epochs, another lr, a pretrained backbone (frozen) or, from scratch, "
        "--input-size near the images' own side; an audit of this model explains little"
    )


# --------------------------------------------------------------------------- laya_cli.fit


def fit_loaders(
    tapped: Tapped,
    loaders: dict[str, Loader | None],
    head: str,
    head_config: HeadSettings,
    cfg: TrainingSettings,
    frozen: bool,
    val_fraction: float,
    classes: Sequence[str] | None,
    use_cache: bool,
) -> LayaModel:
    """``laya_cli.fit``: the attached model and the user's loaders (``train``, ``val``, ``test``; None where not
    given) through ``train_model``; the trained ``LayaModel`` back, its ``checkpoint`` what ``laya train`` writes."""
    data = LoaderData(
        tapped,
        loaders,
        frozen=frozen,
        val_fraction=val_fraction,
        seed=cfg.seed,
        classes=classes,
        use_cache=use_cache,
        device=cfg.device,
    )  # reads the first batch: a model that chooses its taps on it has them now
    spec = tapped.backbone.spec = _attached_spec(tapped, frozen)  # the backbone fills in its tap formats
    ckpt, trained_head = train_model(TrainingJob(tapped.backbone, spec, head, head_config, cfg), data)
    reference = [r.cpu() for r in ckpt["reference"]]
    return LayaModel(tapped.backbone, trained_head, spec, head, list(ckpt["classes"]), reference, ckpt).eval()


def _attached_spec(tapped: Tapped, frozen: bool) -> bb.BackboneSpec:
    """How the checkpoint names an attached backbone: the spec ``attach`` resolved, with the input the loaders
    showed (the image shape, or a text model's token length)."""
    text = isinstance(tapped._cfg, bb.TextInput)
    c, h, w = (1, 8, 8) if text else (tapped.image_shape or (0, 0, 0))
    formats = tapped.backbone.tap_formats
    return replace(
        tapped.backbone.spec,
        name=tapped.name,
        pretrained=False,
        finetune=not frozen,
        in_channels=c,
        image_size=(h, w),
        formats=formats if "?" not in formats else [],
        max_length=tapped._cfg.max_length if text else None,
    )


# --------------------------------------------------------------------------- laya train


def train(req: TrainJobSettings, on_epoch: OnEpoch = None) -> dict:
    """``laya train`` of a named classifier: the request's dataset and backbone through ``train_model``; writes the
    checkpoint and returns it. The caller's request is never changed. (A language model's, ``--task lm``, is
    ``training.lm.train_lm``: the request's task chooses, ``exporting.tasks``.)"""
    req = _checked(req)
    data = load_dataset(req.data)
    if data.skipped:
        log(f"skipped {data.skipped} undecodable image(s)", "yellow")
    backbone = prepare_backbone(req, data)
    data = tokenize_splits(data, backbone)
    job = TrainingJob(
        backbone=backbone,
        spec=backbone.spec,
        head=req.head,
        head_config=req.head_config,
        train=req.train,
        feature_dtype=req.feature_dtype,
        weights_file=req.weights,
        resumable=Resumable(req.state_path, req.resume, req.fingerprint(), req.recorded_options()),
        command_line=req.command_line,
    )
    resumed = req.state_path.is_file()  # a --resume run's state, from before this run
    try:
        ckpt = train_model(job, DatasetData(data, req), on_epoch).checkpoint
    except LayaError as e:
        _discard_failed_state(req, e, resumed)
        raise
    _write_checkpoint(ckpt, req)
    return ckpt


def _discard_failed_state(req: TrainJobSettings, error: LayaError, resumed: bool) -> None:
    """A run that failed leaves no resumable state of its own beside ``--out`` (one that ``--resume`` or a rerun
    would stumble on): a diverged run's never (resuming would replay the divergence), any other failure's unless
    the state was there before it (a ``--resume`` run keeps what it continued) or the error says it is kept (a
    full disk). An interruption is no failure: Ctrl-C and SIGTERM keep the state (``_fit``)."""
    if isinstance(error, StateKept) or (resumed and not isinstance(error, NonFiniteLoss)):
        return
    if distributed.is_main():
        req.state_path.unlink(missing_ok=True)


def prepare_backbone(req: TrainJobSettings, data) -> bb.TappedBackbone:
    """The request's backbone, built (and loaded with its --weights file) as its spec says; ``data`` must then go
    through ``tokenize_splits`` (a text backbone's tokenizer may be trained on its training split)."""
    c, h, w = (1, 8, 8) if is_text(data) else data.image_shape  # text: the backbone's tokenizer sets the input
    name = bb.backbone_name(req.backbone, req.arch)  # --arch / FILE.pt2 (docs/backbones.md)
    finetune = bb.is_builtin(name) if req.finetune is None else req.finetune
    pretrained = bb.default_pretrained(name, finetune, req.weights) if req.pretrained is None else req.pretrained
    spec = bb.BackboneSpec(
        name,
        list(req.layers),
        req.pool,
        pretrained,
        finetune,
        c,
        (h, w),
        req.input_size,
        max_length=req.max_length,
        taps=req.taps,
    )
    state = None
    if req.weights:
        loaded = bb.read_weights_file(req.weights, req.trust_pickle)
        state = loaded.state_dict() if isinstance(loaded, nn.Module) else loaded
    torch.manual_seed(req.train.seed)
    backbone = bb.build_backbone(spec, state, trust_pickle=req.trust_pickle)
    if req.max_length is not None and not isinstance(backbone.input_cfg, bb.TextInput):
        raise LayaError(f"--max-length applies to text models; {name} takes images")
    log(bb.start_line(backbone, req.weights))
    if bb.frozen_random(finetune, "" if req.weights else backbone.weights_source):
        warn(bb.frozen_random_warning(name))
    upscaled = None if is_text(data) else bb.upscale_warning((h, w), backbone.adapter.size, backbone.weights_source)
    if upscaled and not req.weights:
        warn(upscaled)
    return backbone


def _checked(req: TrainJobSettings) -> TrainJobSettings:
    """A validated copy of the request (the caller's is never changed), checked before any data is loaded."""
    req = copy.deepcopy(req).validate()
    req = evolve(req, head=match_choice("head", req.head, HEADS))
    req = evolve(req, data=evolve(req.data, name=dataset_name(req.data.name)))
    req = resolved_request(req)  # --align / --align-target: the kind's default where not given (recorded resolved)
    check_writable(req.out)
    check_precision(req.train.precision, req.train.device)  # before any data is read or model built
    bb.preflight(req.backbone, req.arch, req.finetune, req.pretrained, req.weights)
    check_no_unfinished_run(req)
    if req.data.image_size is None and holds_images(req.data):
        # file-based images are decoded at the backbone's input size (32 for the built-ins)
        spec = bb.BackboneSpec(bb.backbone_name(req.backbone, req.arch), input_size=req.input_size)
        req = evolve(req, data=evolve(req.data, image_size=bb.input_side(spec)))
        if req.data.image_size is None:  # before any image is decoded
            raise LayaError(f"{spec.name} is a text model but dataset {req.data.name} holds images")
    return req


def check_no_unfinished_run(req: TrainJobSettings) -> None:
    """Refuse to silently restart over an interrupted run's state: ``--resume`` continues it, ``--restart``
    replaces it. ``--restart`` removes the old state (before any work, so nothing mixes)."""
    if req.resume and req.restart:
        raise LayaError(
            "--resume and --restart exclude each other: --resume continues the saved run, --restart discards it"
        )
    if not req.state_path.is_file():
        if req.resume:  # before loading any data
            raise LayaError(f"--resume: no saved training state at {req.state_path}; start without --resume")
        return
    if req.restart:
        if distributed.is_main():  # under torchrun rank 0 owns the file
            req.state_path.unlink(missing_ok=True)
        return
    if not req.resume:
        raise LayaError(
            f"{req.state_path} holds an interrupted training run{_epochs_in(req.state_path)}: run the "
            f"same command with --resume to continue it, or with --restart to start over"
        )


def _epochs_in(path: Path) -> str:
    try:
        st = safe_torch_load(path, "training state")
        return f" (after epoch {len(st['history'])})"
    except Exception:  # unreadable: the message stands without the epoch
        return ""


def _write_checkpoint(ckpt: dict, req: TrainJobSettings) -> None:
    """Rank 0 writes the checkpoint, then removes the resumable state; the other ranks wait until it is there.
    On a full disk the finished training stays resumable."""
    if distributed.is_main():
        try:
            save_checkpoint(ckpt, req.out)
        except LayaError as e:
            if not req.state_path.is_file():
                raise
            raise LayaError(
                f"{e}; the finished training is kept in {req.state_path}: free space and run the "
                f"same command with --resume to write the checkpoint"
            ) from None
        req.state_path.unlink(missing_ok=True)
    distributed.barrier()
