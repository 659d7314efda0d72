"""Training: a head on cached features (frozen backbone) or backbone + head end to end.

Adam, early stopping on validation accuracy with the best weights restored. Same seed,
same result on CPU: initialisation and shuffling both come from ``--seed``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import backbones as bb
from ..auditing.metrics import accuracy, macro_f1
from ..data.datasets import DataSplits, dataset_name, is_file_dataset, load_dataset
from ..data.images import take
from ..data.text import is_text, tokenize_splits
from ..features.cache import FeatureCache, cached_extract, feature_key
from ..features.extraction import LayerFeatures, batches, extract, tap_means, to_float_images
from ..model.checkpoint import checkpoint_body, save_checkpoint
from ..model.heads import HEADS, build_head
from ..model.laya_model import EndToEnd
from ..runtime import distributed
from ..runtime.config import TrainConfig, TrainRequest, diff_options
from ..runtime.device import check_precision, precision, resolved_precision, to_device
from ..runtime.distributed import gather_rows, shard_bounds
from ..runtime.errors import LayaError, TrainingInterrupted, match_choice, sigterm_as_interrupt
from ..runtime.fileio import atomic_torch_save, check_writable
from ..runtime.progress import log, track
from ..runtime.trust import safe_torch_load
from .alignment import Alignment
from .stopping import stopping_score, validation_faithfulness


@dataclass
class EpochRecord:
    epoch: int
    loss: float
    train_accuracy: float
    val_accuracy: float
    seconds: float
    best: bool
    val_faithfulness: float | None = None  # --stop-on combined: α's validation faithfulness (training/stopping.py)


@dataclass
class EarlyStopping:
    """Early stopping on a validation score (the accuracy, or accuracy + α's faithfulness with ``--stop-on
    combined``): the best weights so far and the epochs since them."""

    patience: int
    best_accuracy: float = -1.0  # the best score (named for the accuracy it was first, as resume states store it)
    best_model: dict | None = None
    since_best: int = 0

    @property
    def exhausted(self) -> bool:
        return self.since_best >= self.patience

    def update(self, score: float, model: nn.Module) -> bool:
        """Whether ``score`` is a new best; if so, ``model``'s weights are kept."""
        if score > self.best_accuracy:
            self.best_accuracy, self.since_best, self.best_model = score, 0, _clone_state(model)
            return True
        self.since_best += 1
        return False


@dataclass
class _Run:
    """What a run carries from one epoch to the next: exactly what its resumable state holds."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    shuffle: torch.Generator
    stopping: EarlyStopping
    alignment: Alignment | None = None
    history: list[EpochRecord] = field(default_factory=list)

    def state_dict(self, fingerprint: str, options: dict | None) -> dict:
        return {
            "format": "laya-train-state",
            "fingerprint": fingerprint,
            "options": options,
            "model": _clone_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "shuffle_rng": self.shuffle.get_state(),
            "torch_rng": torch.get_rng_state(),
            "best_accuracy": self.stopping.best_accuracy,
            "best_model": self.stopping.best_model,
            "since_best": self.stopping.since_best,
            "history": [asdict(r) for r in self.history],
            **({"alignment": self.alignment.state_dict()} if self.alignment is not None else {}),
        }

    def load_state_dict(self, st: dict) -> None:
        self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])
        self.shuffle.set_state(st["shuffle_rng"])
        torch.set_rng_state(st["torch_rng"])
        self.stopping.best_accuracy, self.stopping.best_model = st["best_accuracy"], st["best_model"]
        self.stopping.since_best = st["since_best"]
        self.history = [EpochRecord(**r) for r in st["history"]]
        if self.alignment is not None:
            self.alignment.load_state_dict(st.get("alignment"))


@torch.no_grad()
def predict(model: nn.Module, inputs, batch_size: int = 1024, device: str = "cpu", shard: bool = True) -> Tensor:
    """Predicted classes for aligned inputs (features list or [images]), or for features read batch
    by batch (a sharded store's ``StoredFeatures``).

    Under torchrun (``shard``) each rank predicts its own whole batches; every rank gets all.
    """
    model.eval()
    n = len(inputs) if hasattr(inputs, "batches") else len(inputs[0])
    start, stop = shard_bounds(n, batch_size) if shard else (0, n)
    chunks = (
        (xs for xs, _ in inputs.batches(batch_size, start, stop))
        if hasattr(inputs, "batches")
        else batches([take(t, slice(start, stop)) for t in inputs], batch_size)
    )  # file images stay lazy
    preds = [model([to_device(t, device) for t in chunk]).logits.argmax(-1).cpu() for chunk in chunks]
    out = torch.cat(preds) if preds else torch.zeros(0, dtype=torch.long)
    return gather_rows(out, n) if shard else out


def _clone_state(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def fit(
    model: nn.Module,
    train: tuple[list[Tensor], Tensor],
    val: tuple[list[Tensor], Tensor],
    cfg: TrainConfig,
    on_epoch: Callable[[EpochRecord], None] | None = None,
    state_path: str | Path | None = None,
    resume: bool = False,
    fingerprint: str = "",
    data_parallel: bool = False,
    options: dict | None = None,
    alignment: Alignment | None = None,
) -> list[EpochRecord]:
    """Train ``model(inputs) -> HeadOutput`` with early stopping; restores the best weights.

    With ``state_path``, everything needed to continue (weights, optimizer, RNG states, best
    weights, history) is written atomically after every epoch (by rank 0 only); ``resume``
    continues from it and ends with exactly the weights an uninterrupted run would have.
    ``options`` (the run's ``TrainRequest.options()``) are stored in the state beside the
    ``fingerprint``, so a refused ``--resume`` can say which option changed.

    Under torchrun with ``data_parallel``, the model is wrapped in DistributedDataParallel and
    every global batch (same size, same seeded order as one process) is split across the ranks;
    each rank's loss is its share of the batch's mean, so the averaged gradient is the
    one-process batch gradient. Without it every rank trains the same replica on all the data
    (what the cheap head-on-features training does: identical on every rank by construction).

    ``train``/``val`` may also be features read from a sharded store (``store.StoredFeatures``):
    training then reads shuffled mini-batches shard-wise through a bounded buffer (memory flat in the
    number of samples); under torchrun each rank reads its own shards and the head is trained with
    DistributedDataParallel (global batch = ``cfg.batch_size``, split over the ranks).

    ``alignment`` (``laya train --align``) adds its term to the loss of a LAYA head (one process).
    """
    torch.manual_seed(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    run = _Run(model, optimizer, torch.Generator().manual_seed(cfg.seed), EarlyStopping(cfg.patience), alignment)
    (train_x, train_y), (val_x, val_y) = _pair(train), _pair(val)
    if resume:
        run.load_state_dict(load_train_state(state_path, fingerprint, options))
        log(f"resuming after epoch {len(run.history)} from {state_path}")
    ddp = _data_parallel(model, cfg.device, data_parallel or _from_store(train_x), alignment)
    for epoch in range(len(run.history) + 1, cfg.epochs + 1):
        if run.stopping.exhausted:
            break
        start = time.perf_counter()
        loss_sum, correct = _train_epoch(run, ddp, train_x, train_y, cfg, epoch)
        val_acc = accuracy(predict(model, val_x, device=cfg.device), val_y)
        val_faith = _val_faithfulness(model, val_x, cfg, alignment)
        improved = run.stopping.update(stopping_score(val_acc, val_faith), model)
        n = len(train_y)
        seconds = time.perf_counter() - start
        record = EpochRecord(epoch, loss_sum / n, correct / n, val_acc, seconds, improved, val_faith)
        run.history.append(record)
        if state_path is not None and distributed.is_main():
            save_train_state(run.state_dict(fingerprint, options), state_path)
        if on_epoch:
            on_epoch(record)
    model.load_state_dict(run.stopping.best_model)
    return run.history


def _val_faithfulness(model, val_x, cfg: TrainConfig, alignment: Alignment | None) -> float | None:
    """``--stop-on combined``: α's validation faithfulness against r̄ (the alignment term's reference when there is
    one: the training mean, or its running mean end to end); None otherwise."""
    if cfg.stop_on != "combined":
        return None
    reference = alignment.reference if alignment is not None else None
    return validation_faithfulness(model, val_x, reference, cfg.device)


def _pair(data):
    """(inputs, labels) from a (list, labels) pair or from features read batch by batch (a store)."""
    return (data, data.labels) if _from_store(data) else data


def _from_store(data) -> bool:
    """Whether ``data`` are features read batch by batch from a sharded store (``StoredFeatures``)."""
    return hasattr(data, "epoch_batches")


def _data_parallel(model: nn.Module, device: str, split_batches: bool, alignment: Alignment | None):
    """The DistributedDataParallel wrapper when torchrun's ranks split the batches; None otherwise."""
    if not (split_batches and distributed.active()):
        return None
    if alignment is not None:
        raise LayaError("--align does not run data-parallel under torchrun yet; train with one process")
    return _wrap_ddp(model, device)


def _train_epoch(run: _Run, ddp, train_x, train_y, cfg: TrainConfig, epoch: int) -> tuple[float, int]:
    """One pass over the training data: (summed loss, correct predictions), over all the ranks."""
    run.model.train()
    if ddp is not None and _from_store(train_x):  # each rank reads its own shards
        loss_sum, correct = _store_ddp_epoch(ddp, run.optimizer, train_x, cfg, run.shuffle, epoch)
    else:
        loss_sum, correct = 0.0, 0
        shuffled = (
            ([*xs, y] for xs, y in train_x.epoch_batches(cfg.batch_size, run.shuffle))
            if _from_store(train_x)
            else batches([*train_x, train_y], cfg.batch_size, run.shuffle)
        )
        n_batches = (len(train_y) + cfg.batch_size - 1) // cfg.batch_size
        for *xs, y in track(shuffled, f"epoch {epoch}", n_batches):
            if ddp is not None:
                batch_loss, batch_correct = _ddp_step(ddp, run.optimizer, xs, y, cfg.device)
            else:
                batch_loss, batch_correct = _step(run.model, run.optimizer, xs, y, cfg.device, run.alignment)
            loss_sum += batch_loss
            correct += batch_correct
    if ddp is not None:
        loss_sum, correct = distributed.all_sum([loss_sum, correct])
        distributed.broadcast_buffers(run.model)  # BatchNorm running stats: rank 0's, everywhere
    return loss_sum, int(correct)


def _step(model: nn.Module, optimizer, xs, y, device: str, alignment: Alignment | None) -> tuple[float, int]:
    """One batch on one process: (summed loss, correct predictions)."""
    xs, y = [to_device(x, device) for x in xs], to_device(y, device)
    if alignment is None:
        logits = model(xs).logits
        loss = F.cross_entropy(logits, y)
    else:
        head = getattr(model, "head", model)  # what the alignment term trains: the LAYA head
        feats = model.features(xs) if isinstance(model, EndToEnd) else xs
        logits = head(feats).logits
        loss = F.cross_entropy(logits, y) + alignment.loss(head, feats, logits)
    _descend(optimizer, loss)
    return loss.item() * len(y), (logits.argmax(-1) == y).sum().item()


def _ddp_step(ddp: nn.Module, optimizer, xs, y, device: str) -> tuple[float, int]:
    """One global batch under DDP: this rank's contiguous share of it, whose loss is its part of the batch
    mean times the world size, since DDP averages the ranks' gradients. This rank's (summed loss, correct)."""
    lo, hi = distributed.shard_bounds(len(y))
    mine, y_mine = [to_device(x[lo:hi], device) for x in xs], to_device(y[lo:hi], device)
    logits = ddp(mine).logits
    ce = F.cross_entropy(logits, y_mine, reduction="sum")
    _descend(optimizer, ce * (distributed.world_size() / len(y)))
    return ce.item(), (logits.argmax(-1) == y_mine).sum().item()


def _descend(optimizer: torch.optim.Optimizer, loss: Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _store_ddp_epoch(
    ddp, optimizer, train_x, cfg: TrainConfig, shuffle: torch.Generator, epoch: int
) -> tuple[float, int]:
    """One epoch of DDP head training where each rank reads its own store shards.

    Every rank takes local batches of ceil(batch / world) rows from its shards; ranks that run out
    take part with empty batches until the rank with the most rows is done (DDP needs every rank at
    every step). Each step's loss is the rank's share of the mean over the step's global rows, so the
    averaged gradient is the gradient of the global batch. The per-rank shuffle is seeded from the
    epoch's draw of the shared generator, so a resumed run replays it.
    """
    world, rank = distributed.world_size(), distributed.rank()
    local = -(-cfg.batch_size // world)
    counts = [train_x.rows_of_rank(r, world) for r in range(world)]
    steps = max(-(-c // local) for c in counts)
    rows_at = lambda c, step: max(0, min(local, c - step * local))
    epoch_seed = int(torch.randint(0, 2**62, (1,), generator=shuffle))
    mine = iter(train_x.epoch_batches(local, torch.Generator().manual_seed(epoch_seed + rank), rank, world))
    empty = ([torch.zeros(0, d) for d in train_x.dims], torch.zeros(0, dtype=torch.long))
    loss_sum, correct = 0.0, 0
    for step in track(range(steps), f"epoch {epoch}", steps):
        xs, y = next(mine, empty) if rows_at(counts[rank], step) else empty
        xs, y = [to_device(x, cfg.device) for x in xs], to_device(y, cfg.device)
        logits = ddp(xs).logits
        ce = F.cross_entropy(logits, y, reduction="sum")
        _descend(optimizer, ce * (world / sum(rows_at(c, step) for c in counts)))
        loss_sum += ce.item()
        correct += (logits.argmax(-1) == y).sum().item()
    return loss_sum, int(correct)  # this rank's; _train_epoch sums them over the ranks


def _wrap_ddp(model: nn.Module, device: str) -> nn.Module:
    """DistributedDataParallel around ``model`` (its parameters stay the same tensors).

    On CUDA, BatchNorm layers become SyncBatchNorm so batch statistics are those of the global
    batch, as with one process; gloo (CPU) has no SyncBatchNorm, so there each rank normalises
    with its share's statistics (plain DDP behaviour; the built-in mlp has LayerNorm only).
    """
    from torch.nn.parallel import DistributedDataParallel

    is_cuda = str(device).startswith("cuda")
    if is_cuda and any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        nn.SyncBatchNorm.convert_sync_batchnorm(model)
    index = torch.device(device).index if is_cuda else None
    return DistributedDataParallel(
        model,
        device_ids=[index] if index is not None else None,
        find_unused_parameters=getattr(model, "find_unused_parameters", True),
    )


def save_train_state(state: dict, path: str | Path) -> None:
    """Write the resumable state; on a full disk, say what is kept and how to go on."""
    kept = Path(path).is_file()
    try:
        atomic_torch_save(state, path)
    except LayaError as e:
        hint = (
            (
                f"the state of epoch {len(state['history']) - 1} is kept there: free space and run the same "
                f"command with --resume"
            )
            if kept
            else "free space and run the command again"
        )
        raise LayaError(f"{e}; {hint}") from None


def load_train_state(path: str | Path | None, fingerprint: str, options: dict | None = None) -> dict:
    """The saved state of an interrupted run, if it was written with the same options.

    A refusal names each option that changed with both values (``train.lr 0.0003 -> 0.001``), from the
    options stored in the state; states written before laya stored them carry only the fingerprint.
    """
    if path is None or not Path(path).is_file():
        raise LayaError(f"--resume: no saved training state at {path}; start without --resume")
    st = safe_torch_load(path, "training state")
    if not isinstance(st, dict) or st.get("format") != "laya-train-state":
        raise LayaError(f"{path} is not a laya training state")
    if st.get("fingerprint") != fingerprint:
        changes = []
        if isinstance(st.get("options"), dict) and options is not None:
            changes = diff_options(st["options"], options, TrainRequest().recorded_options())
        shown = (
            " (" + "; ".join(changes[:4]) + (f"; … {len(changes)} in all" if len(changes) > 4 else "") + ")"
            if changes
            else ""
        )
        raise LayaError(
            f"--resume: {path} was written by a run with other options{shown}; use the same options, "
            f"or --restart to start over"
        )
    return st


def check_no_unfinished_run(req: TrainRequest) -> None:
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


def prepare_backbone(req: TrainRequest, data: DataSplits) -> tuple[bb.TappedBackbone, bb.BackboneSpec, dict | None]:
    """The backbone, its resolved spec and the --weights state it was loaded with; ``data`` must then go
    through ``tokenize_splits`` (a text backbone's tokenizer may be trained on its training split)."""
    c, h, w = (1, 8, 8) if is_text(data) else data.image_shape  # text: the backbone's tokenizer sets the input
    name = bb.backbone_name(req.backbone, req.arch)  # --arch / FILE.pt2 (docs/backbones.md)
    finetune = bb.is_builtin(name) if req.finetune is None else req.finetune
    pretrained = bb.default_pretrained(name, finetune, req.weights) if req.pretrained is None else req.pretrained
    spec = bb.BackboneSpec(
        name, list(req.layers), req.pool, pretrained, finetune, c, (h, w), req.input_size, max_length=req.max_length
    )
    state = None
    if req.weights:
        loaded = bb.read_weights_file(req.weights, req.trust_pickle)
        if isinstance(loaded, nn.Module):
            state = loaded.state_dict()
        else:
            state = loaded
    torch.manual_seed(req.train.seed)
    backbone = bb.build_backbone(spec, state, trust_pickle=req.trust_pickle)
    if req.max_length is not None and not isinstance(backbone.input_cfg, bb.TextInput):
        raise LayaError(f"--max-length applies to text models; {name} takes images")
    return backbone, backbone.spec, state


def train(req: TrainRequest, on_epoch: Callable[[EpochRecord], None] | None = None) -> dict:
    """Run a whole training job and write the checkpoint; returns the checkpoint dict. Backbone passes run at
    ``req.train.precision`` (``--precision``), recorded resolved (bf16 or fp32) in the checkpoint's train_config."""
    with precision(check_precision(req.train.precision, req.train.device)):
        return _train(req, on_epoch)


def _train(req: TrainRequest, on_epoch: Callable[[EpochRecord], None] | None = None) -> dict:
    req = _checked(req)
    data = load_dataset(req.data)
    if data.skipped:
        log(f"[yellow]skipped {data.skipped} undecodable image(s)[/]")
    backbone, spec, _ = prepare_backbone(req, data)
    data = tokenize_splits(data, backbone)
    dev = req.train.device
    backbone.to(dev)
    dims = backbone.dims(to_float_images(data.train.images[:1]).to(dev))
    torch.manual_seed(req.train.seed)
    head = build_head(req.head, dims, len(data.classes), req.head_config).to(dev)
    route = _train_end_to_end if spec.finetune else _train_frozen
    trained = route(req, backbone, spec, head, data, on_epoch)
    history = trained.history
    ckpt = checkpoint_body(
        backbone=backbone,
        spec=spec,
        head=head,
        head_config=req.head_config.to_dict(),
        dims=dims,
        classes=data.classes,
        dataset=_dataset_record(req, data),
        reference=trained.features.mean(),
        history=[asdict(r) for r in history],
        metrics=train_metrics(
            history, len(data.train), len(data.val), trained.test_pred, data.test.labels, len(data.classes)
        ),
        train_config={**asdict(req.train), "precision": resolved_precision(dev)},
        # Pretrained frozen weights load by name (checked by SHA-256); everything else travels in the file.
        weights_file=req.weights,
        feature_dtype=req.feature_dtype,
        tap_reference=trained.tap_reference,
        options=req.command_line,
    )
    _write_checkpoint(ckpt, req)
    return ckpt


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
    """A checkpoint's ``metrics``, for ``laya train`` and ``laya_cli.fit`` alike: the test accuracy and
    macro-F1 (None without a test split, as for the API), the best validation accuracy and its epoch."""
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
    }


class _Trained(NamedTuple):
    """What either route of ``train`` leaves for the checkpoint."""

    history: list[EpochRecord]
    test_pred: Tensor
    features: LayerFeatures  # the training features: their mean is the head-scope reference
    tap_reference: list[Tensor] | None = None  # the network scope's, where the backbone trained too


def _train_end_to_end(req: TrainRequest, backbone, spec, head: nn.Module, data: DataSplits, on_epoch) -> _Trained:
    """Backbone and head trained together on the images (``--finetune``)."""
    dev = req.train.device
    model = EndToEnd(backbone, head, all_parameters_used=bb.is_builtin(spec.name))
    to_inputs = lambda ds: ([ds.images], ds.labels)
    alignment = _alignment(req, head, None)
    history = _fit_resumable(
        req, model, to_inputs(data.train), to_inputs(data.val), on_epoch, data_parallel=True, alignment=alignment
    )
    test_pred = predict(model, [data.test.images], device=dev)
    train_feats = extract(backbone, data.train.images, data.train.labels, device=dev, description="reference")
    # The network-scope reference (docs/checkpoint.md): frozen backbones compute it on first use instead,
    # so that head training from cached features never needs a backbone pass.
    tap_reference = tap_means(backbone, data.train.images, device=dev, description="tap means")
    return _Trained(history, test_pred, train_feats, tap_reference)


def _train_frozen(req: TrainRequest, backbone, spec, head: nn.Module, data: DataSplits, on_epoch) -> _Trained:
    """The head alone, on the frozen backbone's features (extracted once, or read from the cache)."""
    for p in backbone.parameters():
        p.requires_grad_(False)
    feats = _frozen_features(backbone, spec, data, req)
    # In memory: (features, labels); from a sharded store: the StoredFeatures themselves.
    as_inputs = lambda f: f if _from_store(f) else (f.feats, f.labels)
    alignment = _alignment(req, head, feats["train"])
    history = _fit_resumable(
        req, head, as_inputs(feats["train"]), as_inputs(feats["val"]), on_epoch, alignment=alignment
    )
    test = feats["test"]
    test_pred = predict(head, test if _from_store(test) else test.feats, device=req.train.device)
    return _Trained(history, test_pred, feats["train"])


def _checked(req: TrainRequest) -> TrainRequest:
    """A validated copy of the request (the caller's is never changed), checked before any data is loaded."""
    req = copy.deepcopy(req).validate()
    req.head = match_choice("head", req.head, HEADS)
    req.data.name = dataset_name(req.data.name)
    check_writable(req.out)
    bb.preflight(req.backbone, req.arch, req.finetune, req.pretrained, req.weights)
    check_no_unfinished_run(req)
    if req.data.image_size is None and is_file_dataset(req.data.name):
        req.data.image_size = _image_side(req)
    return req


def _dataset_record(req: TrainRequest, data: DataSplits) -> dict:
    """The checkpoint's ``dataset``: how to load the same data again."""
    return {
        "name": req.data.name,
        "data_dir": req.data.data_dir,
        "image_size": req.data.image_size,
        "label": req.data.label,
        "seed": req.data.seed,
        "unmatched": list(data.unmatched),
        **{k: getattr(req.data, k) for k, v in req.data.LATER.items() if getattr(req.data, k) != v},
    }


def _write_checkpoint(ckpt: dict, req: TrainRequest) -> None:
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


def _alignment(req: TrainRequest, head: nn.Module, fixed_feats) -> Alignment | None:
    """``--align λ``: the term with its reference, the mean training features when they are fixed
    (a frozen backbone) and a running mean of the batches when the backbone trains too."""
    if not req.train.align:
        return None
    Alignment.check_head(head)
    reference = fixed_feats.mean() if fixed_feats is not None else None
    return Alignment(req.train.align, reference, scope=req.train.align_scope)


def _fit_resumable(
    req: TrainRequest,
    model,
    train_data,
    val_data,
    on_epoch,
    data_parallel: bool = False,
    alignment: Alignment | None = None,
) -> list[EpochRecord]:
    """fit() with its state beside --out after every epoch; Ctrl-C/SIGTERM leave it resumable."""
    done = []

    def record(r: EpochRecord):
        done.append(r)
        if on_epoch:
            on_epoch(r)

    try:
        with sigterm_as_interrupt():
            return fit(
                model,
                train_data,
                val_data,
                req.train,
                record,
                req.state_path,
                req.resume,
                req.fingerprint(),
                data_parallel=data_parallel,
                options=req.recorded_options(),
                alignment=alignment,
            )
    except KeyboardInterrupt:
        where = f"after epoch {done[-1].epoch}" if done else "before the first epoch ended"
        hint = f"; run the same command with --resume to continue from {req.state_path}" if done or req.resume else ""
        raise TrainingInterrupted(f"training interrupted {where}{hint}") from None


def _image_side(req: TrainRequest) -> int:
    """File-based images are decoded at the backbone's input size (32 for the built-ins)."""
    return bb.input_side(bb.BackboneSpec(bb.backbone_name(req.backbone, req.arch), input_size=req.input_size))


def _frozen_features(backbone, spec, data: DataSplits, req: TrainRequest) -> dict[str, LayerFeatures]:
    cache = FeatureCache() if req.use_cache else None
    out = {}
    for split in ("train", "val", "test"):
        ds = getattr(data, split)
        key = feature_key(backbone, data.identity, split, req.data.seed, len(ds), req.train.device, req.feature_dtype)
        out[split] = cached_extract(
            backbone,
            ds.images,
            ds.labels,
            key,
            cache,
            device=req.train.device,
            description=f"{split} features",
            dtype=req.feature_dtype,
        )
    return out
