"""The training loop: ``fit`` trains a head on features (frozen backbone) or backbone + head end to end.

Adam, early stopping on validation accuracy with the best weights restored, a resumable state after every
epoch, DistributedDataParallel under torchrun. Same seed, same result on CPU: initialisation and shuffling both
come from ``--seed``. The job around it (data, routes, checkpoint) is ``job.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..auditing.metrics import accuracy
from ..data.images import take
from ..features.extraction import batches
from ..model.laya_model import EndToEnd
from ..runtime import distributed
from ..runtime.device import to_device
from ..runtime.distributed import cat_rows, gather_rows, shard_bounds
from ..runtime.errors import LayaError
from ..runtime.fileio import atomic_torch_save
from ..runtime.progress import log, track
from ..runtime.trust import safe_torch_load
from .alignment import Alignment
from .settings import TrainingSettings, TrainJobSettings, diff_options
from .shaping import AlphaShaping
from .stopping import stopping_score, validation_faithfulness


class NonFiniteLoss(LayaError):
    """The training loss (or the weights) became NaN or Inf: the options, not the model's inputs, are at fault; a
    resumable state of such a run would only replay it, so none is kept (``job.train``)."""


class StateKept(LayaError):
    """A failure after which the run's resumable state is kept on purpose (the message says how to continue)."""


def non_finite_loss(cfg: TrainingSettings, epoch: int, where: str) -> NonFiniteLoss:
    """The one line for a NaN/Inf loss, naming the training options of this run that can cause one."""
    suspects = [f"--lr {cfg.lr:g}"]
    suspects += [f"--alpha-entropy {cfg.alpha_entropy:g}"] if cfg.alpha_entropy else []
    suspects += [f"--tau-start {cfg.tau_start:g}"] if cfg.tau_start is not None else []
    suspects += [f"--align {cfg.align:g}"] if cfg.align else []
    suspects += [f"--exit-aware {cfg.exit_aware:g}"] if cfg.exit_aware else []
    suspects += [f"--precision {cfg.precision}"] if cfg.precision not in ("auto", "fp32") else []
    lower = "lower it" if len(suspects) == 1 else "lower the learning rate or the loss terms' weights"
    return NonFiniteLoss(
        f"training diverged: the loss became NaN or Inf {where} of epoch {epoch}; the training options that can "
        f"cause this are {', '.join(suspects)}: {lower} (no training state is kept)"
    )


def _check_finite_loss(loss: float, cfg: TrainingSettings, epoch: int, batch: int) -> None:
    if not math.isfinite(loss):
        raise non_finite_loss(cfg, epoch, f"at batch {batch}")


def _check_finite_weights(model: nn.Module, cfg: TrainingSettings, epoch: int) -> None:
    """After an epoch: the trained weights are finite (a last step can turn them NaN after a finite loss)."""
    check_finite_weights([model], cfg, epoch)


def check_finite_weights(modules, cfg: TrainingSettings, epoch: int) -> None:
    """The trained weights of ``modules`` (None: not trained) are finite, else ``non_finite_loss``'s line."""
    for module in modules:
        for p in module.parameters() if module is not None else ():
            if p.requires_grad and not torch.isfinite(p.detach()).all():
                raise non_finite_loss(cfg, epoch, "in the last step")


@dataclass
class EpochRecord:
    epoch: int
    loss: float
    train_accuracy: float
    val_accuracy: float
    seconds: float
    best: bool
    val_faithfulness: float | None = None  # --stop-on combined: α's validation faithfulness (training/stopping.py)
    # The classification loss alone (cross-entropy, nats per sample); ``loss`` adds the --align, --alpha-entropy
    # and --exit-aware terms. None where not measured apart (data-parallel training).
    cross_entropy: float | None = None


@dataclass
class EarlyStopping:
    """The one early-stopping rule of both tasks: a higher validation score is better (a classifier's accuracy, or
    accuracy + α's faithfulness with ``--stop-on combined``; a language model's held-out objective negated, from
    ``best_accuracy`` −∞); the best weights so far and the epochs since them."""

    patience: int
    best_accuracy: float = -1.0  # the best score (named for the accuracy it was first, as resume states store it)
    best_model: dict | tuple | None = None
    since_best: int = 0

    @property
    def exhausted(self) -> bool:
        return self.since_best >= self.patience

    def update(self, score: float, model, keep: Callable | None = None) -> bool:
        """Whether ``score`` is a new best; if so, ``model``'s weights are kept (``keep(model)``: a copy of them
        that later steps do not change; by default its state dict's)."""
        if score > self.best_accuracy:
            self.best_accuracy, self.since_best, self.best_model = score, 0, (keep or _clone_state)(model)
            return True
        self.since_best += 1
        return False


def epochs(first: int, last: int, stopping: EarlyStopping) -> Iterator[int]:
    """The one epoch loop of both tasks: epochs ``first`` … ``last``, until ``stopping`` has seen ``patience``
    epochs without a better score."""
    for epoch in range(first, last + 1):
        if stopping.exhausted:
            return
        yield epoch


@dataclass
class _Run:
    """What a run carries from one epoch to the next: exactly what its resumable state holds."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    shuffle: torch.Generator
    stopping: EarlyStopping
    alignment: Alignment | None = None
    history: list[EpochRecord] = field(default_factory=list)
    shaping: AlphaShaping | None = None  # --layer-dropout, --alpha-entropy, --tau-start: derived from the epoch

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


def predict(model: nn.Module, inputs, batch_size: int = 1024, device: str = "cpu", shard: bool = True) -> Tensor:
    """Predicted classes for aligned inputs (features list or [images]), or for features read batch
    by batch (a sharded store's ``StoredFeatures``).

    Under torchrun (``shard``) each rank predicts its own whole batches; every rank gets all.
    """
    return predict_outputs(model, inputs, batch_size, device, shard).pred


class Predicted(NamedTuple):
    pred: Tensor  # (N,) predicted classes
    alpha: Tensor | None  # (N, L) the head's α, where asked for


@torch.no_grad()
def predict_outputs(
    model: nn.Module, inputs, batch_size: int = 1024, device: str = "cpu", shard: bool = True, alpha_width=None
) -> Predicted:
    """``predict``, and with ``alpha_width`` (L, for a head with α) the α of every row too, in the same pass (the
    checkpoint's α collapse summary). The width is given, not read from the outputs, because under torchrun a rank
    with no batch still takes part in the gather."""
    model.eval()
    n = len(inputs) if hasattr(inputs, "batches") else len(inputs[0])
    start, stop = shard_bounds(n, batch_size) if shard else (0, n)
    chunks = (
        (xs for xs, _ in inputs.batches(batch_size, start, stop))
        if hasattr(inputs, "batches")
        else batches([take(t, slice(start, stop)) for t in inputs], batch_size)
    )  # file images stay lazy
    preds, alphas = [], []
    for chunk in chunks:
        out = model([to_device(t, device) for t in chunk])
        preds.append(out.logits.argmax(-1).cpu())
        if alpha_width is not None:
            alphas.append(out.alpha.float().cpu())
    pred = cat_rows(preds, torch.long)
    alpha = cat_rows(alphas, torch.float32, alpha_width) if alpha_width is not None else None
    if shard:
        pred, alpha = gather_rows(pred, n), gather_rows(alpha, n) if alpha is not None else None
    return Predicted(pred, alpha)


def _clone_state(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def fit(
    model: nn.Module,
    train: tuple[list[Tensor], Tensor],
    val: tuple[list[Tensor], Tensor],
    cfg: TrainingSettings,
    on_epoch: Callable[[EpochRecord], None] | None = None,
    state_path: str | Path | None = None,
    resume: bool = False,
    fingerprint: str = "",
    data_parallel: bool = False,
    options: dict | None = None,
    alignment: Alignment | None = None,
    shaping: AlphaShaping | None = None,
) -> list[EpochRecord]:
    """Train ``model(inputs) -> HeadOutput`` with early stopping; restores the best weights.

    With ``state_path``, everything needed to continue (weights, optimizer, RNG states, best
    weights, history) is written atomically after every epoch (by rank 0 only); ``resume``
    continues from it and ends with exactly the weights an uninterrupted run would have.
    ``options`` (the run's ``TrainJobSettings.options()``) are stored in the state beside the
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

    ``alignment`` (``laya train --align``) adds its term to the loss of a LAYA head (under torchrun in the same
    DDP backward, on each rank's share: ``_ddp_step``, ``_store_ddp_epoch``);
    ``shaping`` (``--layer-dropout``, ``--alpha-entropy``, ``--tau-start``: ``shaping.py``) trains α (one process).
    """
    torch.manual_seed(cfg.seed)
    optimizer = make_optimizer(model, cfg, n_batches=-(-len(_pair(train)[1]) // cfg.batch_size))
    run = _Run(model, optimizer, torch.Generator().manual_seed(cfg.seed), EarlyStopping(cfg.patience), alignment)
    run.shaping = shaping
    (train_x, train_y), (val_x, val_y) = _pair(train), _pair(val)
    if resume:
        run.load_state_dict(load_train_state(state_path, fingerprint, options))
        log(f"resuming after epoch {len(run.history)} from {state_path}")
    ddp = _data_parallel(model, cfg.device, data_parallel, _from_store(train_x), alignment, shaping)
    for epoch in epochs(len(run.history) + 1, cfg.epochs, run.stopping):
        start = time.perf_counter()
        loss_sum, correct, ce_sum = _train_epoch(run, ddp, train_x, train_y, cfg, epoch)
        _check_finite_weights(model, cfg, epoch)  # before the epoch is kept in the resumable state
        val_acc = accuracy(predict(model, val_x, device=cfg.device), val_y)
        val_faith = _val_faithfulness(model, val_x, cfg, alignment)
        improved = run.stopping.update(stopping_score(val_acc, val_faith), model)
        n = len(train_y)
        seconds = time.perf_counter() - start
        ce = None if ce_sum is None else ce_sum / n
        record = EpochRecord(epoch, loss_sum / n, correct / n, val_acc, seconds, improved, val_faith, ce)
        run.history.append(record)
        if state_path is not None and distributed.is_main():
            save_train_state(run.state_dict(fingerprint, options), state_path)
        if on_epoch:
            on_epoch(record)
    model.load_state_dict(run.stopping.best_model)
    return run.history


def make_optimizer(model: nn.Module, cfg: TrainingSettings, n_batches: int) -> torch.optim.Adam:
    """Adam over the trainable parameters. A backbone trained with its head (``EndToEnd``) at a rate of its own
    (``cfg.backbone_lr``, resolved: training/defaults.py) is a second parameter group, ``name`` "backbone", the head's
    "head" at ``cfg.lr``; with ``cfg.backbone_warmup`` its rate rises linearly to ``backbone_lr`` over the first
    ``n_batches`` steps (``_warm_up``; the schedule lives in the group, so a resumed run's state carries it)."""
    params = [p for p in model.parameters() if p.requires_grad]
    rate = cfg.backbone_lr
    if not isinstance(model, EndToEnd) or rate is None or (rate == cfg.lr and not cfg.backbone_warmup):
        return torch.optim.Adam(params, lr=cfg.lr)
    in_backbone = {id(p) for p in model.backbone.parameters()}
    groups = [
        {"name": "head", "params": [p for p in params if id(p) not in in_backbone], "lr": cfg.lr},
        {"name": "backbone", "params": [p for p in params if id(p) in in_backbone], "lr": rate},
    ]
    if cfg.backbone_warmup:
        steps = max(int(n_batches), 1)
        groups[1].update(lr=rate / steps, warmup_steps=steps, warmup_done=0, target_lr=rate)
    return torch.optim.Adam([g for g in groups if g["params"]], lr=cfg.lr)


def _warm_up(optimizer: torch.optim.Optimizer) -> None:
    """After a step: each group that warms up moves to its next rate, ``target_lr · (k + 1) / warmup_steps`` after
    its k-th step, then stays at ``target_lr``."""
    for group in optimizer.param_groups:
        if "warmup_steps" in group and group["warmup_done"] < group["warmup_steps"]:
            group["warmup_done"] += 1
            steps = group["warmup_steps"]
            group["lr"] = group["target_lr"] * min(group["warmup_done"] + 1, steps) / steps


def _val_faithfulness(model, val_x, cfg: TrainingSettings, alignment: Alignment | None) -> float | None:
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


def _data_parallel(model: nn.Module, device: str, split: bool, store: bool, alignment: Alignment | None, shaping=None):
    """The DistributedDataParallel wrapper when torchrun's ranks split the batches (``split``, or features read
    from a ``store``); None otherwise. With ``alignment`` it wraps ``_WithFeatures(model)`` and tells the term
    that its batches are shares of global ones (``Alignment.data_parallel``). (A store holds a frozen backbone's
    features: its term is the head target's, with a fixed r̄, or the network target's cached removals, looked up by
    the rows each rank's batches carry: ``_store_ddp_epoch``.)"""
    if not ((split or store) and distributed.active()):
        return None
    if shaping is not None:
        options = ", ".join(shaping.cfg.shapes_alpha())
        raise LayaError(f"{options} does not run data-parallel under torchrun yet; train with one process")
    if alignment is None:
        return _wrap_ddp(model, device)
    alignment.data_parallel = True
    return _wrap_ddp(_WithFeatures(model), device)


class _WithFeatures(nn.Module):
    """What DDP runs when the alignment term trains beside the cross-entropy: ``model``'s forward, returning the
    head's inputs (r_1..r_L, the backbone's taps end to end) beside its output, so the term reads the features of
    the very forward DDP's reducer tracks (no second backbone pass outside it)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.find_unused_parameters = getattr(model, "find_unused_parameters", True)

    @property
    def head(self) -> nn.Module:
        return getattr(self.model, "head", self.model)

    def forward(self, xs):
        feats = self.model.features(xs) if isinstance(self.model, EndToEnd) else xs
        return self.head(feats), feats


def _train_epoch(
    run: _Run, ddp, train_x, train_y, cfg: TrainingSettings, epoch: int
) -> tuple[float, int, float | None]:
    """One pass over the training data: (summed loss, correct predictions, summed cross-entropy alone or None), over
    all the ranks; with ``shaping``,
    at the epoch's τ (the head's own τ again afterwards)."""
    if run.shaping is None:
        return _epoch_pass(run, ddp, train_x, train_y, cfg, epoch)
    head = getattr(run.model, "head", run.model)
    run.shaping.start_epoch(head, epoch)
    try:
        return _epoch_pass(run, ddp, train_x, train_y, cfg, epoch)
    finally:
        run.shaping.end_epoch(head)


def _epoch_pass(run: _Run, ddp, train_x, train_y, cfg: TrainingSettings, epoch: int) -> tuple[float, int, float | None]:
    run.model.train()
    ce_sum: float | None = None if ddp is not None else 0.0  # data-parallel steps do not report it apart
    if ddp is not None and _from_store(train_x):  # each rank reads its own shards
        loss_sum, correct = _store_ddp_epoch(ddp, run.optimizer, train_x, cfg, run.shuffle, epoch, run.alignment)
    else:
        loss_sum, correct = 0.0, 0
        with_rows = getattr(run.alignment, "needs_rows", False)  # the network target's cached removals, by row
        rows = [torch.arange(len(train_y))] if with_rows else []  # drawn in the same order: randperm of n
        shuffled = (
            ([*xs, *rest] for xs, *rest in train_x.epoch_batches(cfg.batch_size, run.shuffle, with_rows=with_rows))
            if _from_store(train_x)
            else batches([*train_x, train_y, *rows], cfg.batch_size, run.shuffle)
        )
        n_batches = (len(train_y) + cfg.batch_size - 1) // cfg.batch_size
        for batch, items in enumerate(
            track(shuffled, f"epoch {epoch}", n_batches, unit="batch", of=f"of {cfg.batch_size} samples"), 1
        ):
            at = items.pop() if with_rows else None
            *xs, y = items
            if ddp is not None:
                batch_loss, batch_correct = _ddp_step(ddp, run.optimizer, xs, y, cfg.device, run.alignment, at)
            else:
                batch_loss, batch_correct, batch_ce = _step(
                    run.model, run.optimizer, xs, y, cfg.device, run.alignment, run.shaping, at
                )
                ce_sum += batch_ce
                _check_finite_loss(batch_loss, cfg, epoch, batch)  # DDP: every rank checks the epoch's sum (below)
            loss_sum += batch_loss
            correct += batch_correct
    if ddp is not None:
        loss_sum, correct = distributed.all_sum([loss_sum, correct])
        if not math.isfinite(loss_sum):
            raise non_finite_loss(cfg, epoch, "in the batches")
        distributed.broadcast_buffers(run.model)  # BatchNorm running stats: rank 0's, everywhere
    return loss_sum, int(correct), ce_sum


def _step(
    model: nn.Module,
    optimizer,
    xs,
    y,
    device: str,
    alignment: Alignment | None,
    shaping: AlphaShaping | None = None,
    rows: Tensor | None = None,
) -> tuple[float, int, float]:
    """One batch on one process: (summed loss, correct predictions, summed cross-entropy alone). ``rows``: the
    batch's row indices, for an alignment term that reads per-row data of its own (``Alignment.needs_rows``)."""
    xs, y = [to_device(x, device) for x in xs], to_device(y, device)
    if alignment is None and shaping is None:
        logits = model(xs).logits
        loss = ce = F.cross_entropy(logits, y)
    else:
        head = getattr(model, "head", model)  # what the alignment and shaping terms train: the head's α
        feats = model.features(xs) if isinstance(model, EndToEnd) else xs
        mask = shaping.mask(len(y), len(feats), y.device) if shaping is not None else None
        logits = head(feats, alpha_mask=mask).logits
        loss = ce = F.cross_entropy(logits, y)
        if alignment is not None:
            loss = loss + alignment.loss(head, feats, logits, inputs=xs, rows=rows)
        if shaping is not None:
            loss = loss + shaping.loss(head, feats, y)
    _descend(optimizer, loss)
    # one host read for the step's three figures (float64 holds a float32 and a count exactly: the same numbers)
    total, correct, ce_mean = torch.stack([loss.detach().double(), (logits.argmax(-1) == y).sum().double(),
                                           ce.detach().double()]).tolist()  # fmt: skip
    return total * len(y), int(correct), ce_mean * len(y)


def _ddp_step(
    ddp: nn.Module, optimizer, xs, y, device: str, alignment: Alignment | None = None, rows: Tensor | None = None
) -> tuple[float, int]:
    """One global batch under DDP: this rank's contiguous share of it, whose loss is its part of the batch
    mean times the world size, since DDP averages the ranks' gradients. This rank's (summed loss, correct).

    ``alignment``: its term on this rank's share (``rows``: the share's row indices, where the term reads per-row
    data), in the same backward as the cross-entropy, so DDP's all-reduce averages both. The term scales itself
    to the global batch (``ranking_loss``'s pairs counted over the ranks); the whole global batch ``xs`` goes to
    it as ``inputs`` (the network target takes its first rows, shared out over the ranks)."""
    lo, hi = distributed.shard_bounds(len(y))
    mine, y_mine = [to_device(x[lo:hi], device) for x in xs], to_device(y[lo:hi], device)
    scale = distributed.world_size() / len(y)
    if alignment is None:
        logits = ddp(mine).logits
        ce = F.cross_entropy(logits, y_mine, reduction="sum")
        _descend(optimizer, ce * scale)
        return ce.item(), (logits.argmax(-1) == y_mine).sum().item()
    out, feats = ddp(mine)
    logits = out.logits
    ce = F.cross_entropy(logits, y_mine, reduction="sum")
    term = alignment.loss(ddp.module.head, feats, logits, inputs=xs, rows=rows[lo:hi] if rows is not None else None)
    _descend(optimizer, ce * scale + term)
    # the term's part of the epoch's summed loss (one process: term · batch); the ranks' terms average to the term
    return ce.item() + term.item() * len(y) / distributed.world_size(), (logits.argmax(-1) == y_mine).sum().item()


def _descend(optimizer: torch.optim.Optimizer, loss: Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    _warm_up(optimizer)


def _store_ddp_epoch(
    ddp,
    optimizer,
    train_x,
    cfg: TrainingSettings,
    shuffle: torch.Generator,
    epoch: int,
    alignment: Alignment | None = None,
) -> tuple[float, int]:
    """One epoch of DDP head training where each rank reads its own store shards.

    Every step is a global batch of ``cfg.batch_size`` rows (the last one short), ceil(N / batch) steps, as
    with one process; each rank gives its share of it in proportion to its rows (``_store_shares``), so a rank
    with more shards gives more rows a step and a rank with none takes part with empty batches (DDP needs every
    rank at every step). Each step's loss is the rank's share of the mean over the step's global rows, so the
    averaged gradient is the gradient of the global batch. The per-rank shuffle is seeded from the
    epoch's draw of the shared generator, so a resumed run replays it. ``alignment``: its term on the rank's local
    batch in the same backward, scaled to the step's global rows as in ``_ddp_step`` (every rank takes part, an
    empty batch too); where it reads per-row data (``Alignment.needs_rows``: the frozen network target's cached
    removals) the batches carry their rows (positions in ``train_x``, the training row indices).
    """
    world, rank = distributed.world_size(), distributed.rank()
    local = -(-cfg.batch_size // world)
    shares = _store_shares([train_x.rows_of_rank(r, world) for r in range(world)], cfg.batch_size)
    epoch_seed = int(torch.randint(0, 2**62, (1,), generator=shuffle))
    with_rows = getattr(alignment, "needs_rows", False)
    read = train_x.epoch_batches(local, torch.Generator().manual_seed(epoch_seed + rank), rank, world, with_rows)
    mine = _recut(read, [int(k) for k in shares[:, rank] if k])
    none = torch.zeros(0, dtype=torch.long)
    empty = ([torch.zeros(0, d) for d in train_x.dims], none, *([none] if with_rows else []))
    loss_sum, correct = 0.0, 0
    for step in track(range(len(shares)), f"epoch {epoch}", len(shares), unit="step", of="of one global batch"):
        xs, y, *rows = next(mine) if shares[step, rank] else empty
        xs, y = [to_device(x, cfg.device) for x in xs], to_device(y, cfg.device)
        global_rows = int(shares[step].sum())
        if alignment is None:
            logits, term = ddp(xs).logits, None
        else:
            out, feats = ddp(xs)
            logits = out.logits
            term = alignment.loss(ddp.module.head, feats, logits, rows=rows[0] if rows else None)
        ce = F.cross_entropy(logits, y, reduction="sum")
        loss = ce * (world / global_rows)
        _descend(optimizer, loss if term is None else loss + term)
        loss_sum += ce.item() + (term.item() * global_rows / world if term is not None else 0.0)
        correct += (logits.argmax(-1) == y).sum().item()
    return loss_sum, int(correct)  # this rank's; _train_epoch sums them over the ranks


def _store_shares(counts: Sequence[int], batch_size: int) -> np.ndarray:
    """Rows each rank gives each DDP step of an epoch on a store (steps × ranks), ranks holding ``counts`` rows:
    every step a global batch of ``batch_size`` rows (the last one short), with each rank's rows spread evenly
    over the epoch's steps (equal counts: an even batch halves exactly over two ranks)."""
    n = sum(counts)
    shares = np.zeros((-(-n // batch_size), len(counts)), dtype=np.int64)
    if n:
        owner = np.repeat(np.arange(len(counts)), counts)  # rank of each row, ranks in turn
        at = np.concatenate([(np.arange(c) + 0.5) / c for c in counts if c])  # its place in the epoch, in [0, 1)
        np.add.at(shares, (np.arange(n) // batch_size, owner[np.argsort(at, kind="stable")]), 1)
    return shares


def _recut(batches: Iterable[tuple], sizes: Sequence[int]) -> Iterator[tuple]:
    """The rows of ``batches`` (features, labels[, rows]), in their order, again in batches of ``sizes`` (each
    > 0)."""
    source = iter(batches)
    held: list[Tensor] = []  # the features, then the labels (and the rows): one flat list, cut alike
    k = 0  # how many of them are features
    for size in sizes:
        while not held or len(held[k]) < size:
            xs, *rest = next(source)
            more, k = [*xs, *rest], len(xs)
            held = [torch.cat([a, b]) for a, b in zip(held, more)] if held else more
        yield ([t[:size] for t in held[:k]], *[t[:size] for t in held[k:]])
        held = [t[size:] for t in held]


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
        raise (StateKept if kept else LayaError)(f"{e}; {hint}") from None


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
            changes = diff_options(st["options"], options, TrainJobSettings().recorded_options())
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
