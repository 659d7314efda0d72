"""Training: a head on cached features (frozen backbone) or backbone + head end to end.

Adam, early stopping on validation accuracy with the best weights restored. Same seed,
same result on CPU: initialisation and shuffling both come from ``--seed``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import backbones as bb
from .checkpoint import save_checkpoint
from .data import DataRequest, DataSplits, is_file_dataset, load_dataset
from .errors import LayaError, TrainingInterrupted, unknown_choice
from .features import FeatureCache, LayerFeatures, batches, cache_key, cached_extract, extract, to_float_images
from .fileio import atomic_path, check_writable
from .heads import HEADS, HeadConfig, build_head
from .metrics import accuracy, macro_f1
from .model import EndToEnd
from .progress import log, track
from .trust import safe_torch_load


@dataclass
class TrainConfig:
    epochs: int = 50
    batch_size: int = 128
    lr: float = 3e-4
    patience: int = 5
    seed: int = 1337
    device: str = "cpu"

    def validate(self) -> "TrainConfig":
        if self.epochs < 1:
            raise LayaError(f"--epochs must be at least 1, got {self.epochs}")
        if self.batch_size < 1:
            raise LayaError(f"--batch-size must be at least 1, got {self.batch_size}")
        if not self.lr > 0:
            raise LayaError(f"--lr must be positive, got {self.lr}")
        if self.patience < 1:
            raise LayaError(f"--patience must be at least 1, got {self.patience}")
        return self


@dataclass
class EpochRecord:
    epoch: int
    loss: float
    train_accuracy: float
    val_accuracy: float
    seconds: float
    best: bool


@torch.no_grad()
def predict(model: nn.Module, inputs: list[Tensor], batch_size: int = 1024, device: str = "cpu") -> Tensor:
    """Predicted classes for aligned inputs (features list or [images])."""
    model.eval()
    preds = [model([t.to(device) for t in chunk]).logits.argmax(-1).cpu() for chunk in batches(inputs, batch_size)]
    return torch.cat(preds)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Treat SIGTERM (a scheduler's kill) like Ctrl-C so both leave a resumable state."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _clone_state(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def fit(model: nn.Module, train: tuple[list[Tensor], Tensor], val: tuple[list[Tensor], Tensor],
        cfg: TrainConfig, on_epoch: Callable[[EpochRecord], None] | None = None,
        state_path: str | Path | None = None, resume: bool = False, fingerprint: str = "") -> list[EpochRecord]:
    """Train ``model(inputs) -> HeadOutput`` with early stopping; restores the best weights.

    With ``state_path``, everything needed to continue (weights, optimizer, RNG states, best
    weights, history) is written atomically after every epoch; ``resume`` continues from it and
    ends with exactly the weights an uninterrupted run would have.
    """
    torch.manual_seed(cfg.seed)
    shuffle = torch.Generator().manual_seed(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    (train_x, train_y), (val_x, val_y) = train, val
    best_acc, best_state, since_best, history = -1.0, None, 0, []
    if resume:
        st = load_train_state(state_path, fingerprint)
        model.load_state_dict(st["model"])
        optimizer.load_state_dict(st["optimizer"])
        shuffle.set_state(st["shuffle_rng"])
        torch.set_rng_state(st["torch_rng"])
        best_acc, best_state, since_best = st["best_accuracy"], st["best_model"], st["since_best"]
        history = [EpochRecord(**r) for r in st["history"]]
        log(f"resuming after epoch {len(history)} from {state_path}")
    n_batches = (len(train_y) + cfg.batch_size - 1) // cfg.batch_size
    for epoch in range(len(history) + 1, cfg.epochs + 1):
        if since_best >= cfg.patience:
            break
        start = time.perf_counter()
        model.train()
        loss_sum, correct = 0.0, 0
        for *xs, y in track(batches([*train_x, train_y], cfg.batch_size, shuffle), f"epoch {epoch}", n_batches):
            xs, y = [x.to(cfg.device) for x in xs], y.to(cfg.device)
            logits = model(xs).logits
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += (logits.argmax(-1) == y).sum().item()
        val_acc = accuracy(predict(model, val_x, device=cfg.device), val_y)
        improved = val_acc > best_acc
        if improved:
            best_acc, since_best, best_state = val_acc, 0, _clone_state(model)
        else:
            since_best += 1
        record = EpochRecord(epoch, loss_sum / len(train_y), correct / len(train_y), val_acc,
                             time.perf_counter() - start, improved)
        history.append(record)
        if state_path is not None:
            save_checkpoint_file({
                "format": "laya-train-state", "fingerprint": fingerprint, "model": _clone_state(model),
                "optimizer": optimizer.state_dict(), "shuffle_rng": shuffle.get_state(),
                "torch_rng": torch.get_rng_state(), "best_accuracy": best_acc, "best_model": best_state,
                "since_best": since_best, "history": [asdict(r) for r in history],
            }, state_path)
        if on_epoch:
            on_epoch(record)
    model.load_state_dict(best_state)
    return history


def save_checkpoint_file(obj: dict, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def load_train_state(path: str | Path | None, fingerprint: str) -> dict:
    if path is None or not Path(path).is_file():
        raise LayaError(f"--resume: no saved training state at {path}; start without --resume")
    st = safe_torch_load(path, "training state")
    if not isinstance(st, dict) or st.get("format") != "laya-train-state":
        raise LayaError(f"{path} is not a laya training state")
    if st.get("fingerprint") != fingerprint:
        raise LayaError(f"--resume: {path} was written by a run with other options; use the same options or remove it")
    return st


@dataclass
class TrainRequest:
    backbone: str = "mlp"
    head: str = "laya"
    head_config: HeadConfig = field(default_factory=HeadConfig)
    data: DataRequest = field(default_factory=DataRequest)
    train: TrainConfig = field(default_factory=TrainConfig)
    layers: list[str] = field(default_factory=list)
    pool: str = "auto"
    pretrained: bool = False
    weights: str | None = None  # a user's weights file (state dict), with backbone = its arch
    finetune: bool | None = None  # None: end to end for built-ins, frozen otherwise
    trust_pickle: bool = False
    use_cache: bool = True
    out: str = "model.pt"
    resume: bool = False  # continue from the state an interrupted run left beside --out

    @property
    def state_path(self) -> Path:
        return Path(self.out).with_name(Path(self.out).name + ".state")

    def fingerprint(self) -> str:
        """What must match for --resume to continue a run (everything but output and device)."""
        d = asdict(self)
        for k in ("out", "resume", "use_cache"):
            d.pop(k)
        d["train"].pop("device")
        return cache_key(**d)


def prepare_backbone(req: TrainRequest, data: DataSplits) -> tuple[bb.TappedBackbone, bb.BackboneSpec, dict | None]:
    c, h, w = data.image_shape
    finetune = bb.is_builtin(req.backbone) if req.finetune is None else req.finetune
    spec = bb.BackboneSpec(req.backbone, list(req.layers), req.pool, req.pretrained, finetune, c, (h, w))
    state = None
    if req.weights:
        loaded = bb.read_weights_file(req.weights, req.trust_pickle)
        if isinstance(loaded, nn.Module):
            state = loaded.state_dict()
        else:
            state = loaded
    torch.manual_seed(req.train.seed)
    backbone = bb.build_backbone(spec, state)
    return backbone, spec, state


def train(req: TrainRequest, on_epoch: Callable[[EpochRecord], None] | None = None) -> dict:
    """Run a whole training job and write the checkpoint; returns the checkpoint dict."""
    req.train.validate()
    req.head_config.validate()
    if req.head not in HEADS:
        raise unknown_choice("head", req.head, HEADS)
    check_writable(req.out)
    if req.data.image_size is None and is_file_dataset(req.data.name):
        req.data.image_size = _image_side(req)
    data = load_dataset(req.data)
    if data.skipped:
        log(f"[yellow]skipped {data.skipped} undecodable image(s)[/]")
    backbone, spec, _ = prepare_backbone(req, data)
    dev = req.train.device
    backbone.to(dev)
    dims = backbone.dims(to_float_images(data.train.images[:1]).to(dev))
    torch.manual_seed(req.train.seed)
    head = build_head(req.head, dims, len(data.classes), req.head_config).to(dev)

    if spec.finetune:
        model = EndToEnd(backbone, head)
        to_inputs = lambda ds: ([ds.images], ds.labels)
        history = _fit_resumable(req, model, to_inputs(data.train), to_inputs(data.val), on_epoch)
        test_pred = predict(model, [data.test.images], device=dev)
        train_feats = extract(backbone, data.train.images, data.train.labels, device=dev, description="reference")
    else:
        for p in backbone.parameters():
            p.requires_grad_(False)
        split_feats = _frozen_features(backbone, spec, data, req)
        train_feats = split_feats["train"]
        as_inputs = lambda f: (f.feats, f.labels)
        history = _fit_resumable(req, head, as_inputs(train_feats), as_inputs(split_feats["val"]), on_epoch)
        test_pred = predict(head, split_feats["test"].feats, device=dev)

    test_y = data.test.labels
    metrics = {
        "test_accuracy": accuracy(test_pred, test_y),
        "test_macro_f1": macro_f1(test_pred, test_y, len(data.classes)),
        "val_accuracy": max(r.val_accuracy for r in history),
        "epochs_run": len(history),
        "best_epoch": max(history, key=lambda r: r.val_accuracy).epoch,
        "n_train": len(data.train), "n_val": len(data.val), "n_test": len(data.test),
    }
    ckpt = {
        "backbone": {
            "spec": spec.to_dict(),
            # Pretrained frozen weights load by name; everything else travels in the file.
            "weights": None if (spec.pretrained and not spec.finetune and not req.weights)
            else {k: v.detach().cpu() for k, v in backbone.model.state_dict().items()},
            "input": {"channels": backbone.adapter.channels, "size": list(backbone.adapter.size or []),
                      "mean": backbone.adapter.mean.flatten().tolist(), "std": backbone.adapter.std.flatten().tolist()},
        },
        "layers": list(spec.layers),
        "dims": list(dims),
        "head": {"kind": req.head, "config": req.head_config.to_dict(),
                 "weights": {k: v.detach().cpu() for k, v in head.state_dict().items()}},
        "classes": list(data.classes),
        "dataset": {"name": req.data.name, "data_dir": req.data.data_dir, "image_size": req.data.image_size,
                    "label": req.data.label, "seed": req.data.seed},
        "reference": [r.cpu() for r in train_feats.mean()],
        "history": [asdict(r) for r in history],
        "metrics": metrics,
        "train_config": asdict(req.train),
    }
    save_checkpoint(ckpt, req.out)
    req.state_path.unlink(missing_ok=True)
    return ckpt


def _fit_resumable(req: TrainRequest, model, train_data, val_data, on_epoch) -> list[EpochRecord]:
    """fit() with its state beside --out after every epoch; Ctrl-C/SIGTERM leave it resumable."""
    done = []

    def record(r: EpochRecord):
        done.append(r)
        if on_epoch:
            on_epoch(r)

    try:
        with sigterm_as_interrupt():
            return fit(model, train_data, val_data, req.train, record, req.state_path, req.resume, req.fingerprint())
    except KeyboardInterrupt:
        where = f"after epoch {done[-1].epoch}" if done else "before the first epoch ended"
        hint = f"; run the same command with --resume to continue from {req.state_path}" if done or req.resume else ""
        raise TrainingInterrupted(f"training interrupted {where}{hint}") from None


def _image_side(req: TrainRequest) -> int:
    """File-based images are decoded at the backbone's input size (32 for the built-ins)."""
    if bb.is_builtin(req.backbone):
        return 32
    _, cfg = bb.build_model(bb.BackboneSpec(req.backbone))
    return cfg.size[0] if cfg.size else 224


def _frozen_features(backbone, spec, data: DataSplits, req: TrainRequest) -> dict[str, LayerFeatures]:
    cache = FeatureCache() if req.use_cache else None
    weights_id = bb.state_fingerprint(backbone.model.state_dict())
    out = {}
    for split in ("train", "val", "test"):
        ds = getattr(data, split)
        key = cache_key(weights=weights_id, backbone=spec.name, layers=spec.layers, pool=spec.pool,
                        input=[backbone.adapter.channels, backbone.adapter.size, backbone.adapter.mean.tolist(),
                               backbone.adapter.std.tolist()],
                        data=data.identity, split=split, split_seed=req.data.seed, n=len(ds))
        out[split] = cached_extract(backbone, ds.images, ds.labels, key, cache, device=req.train.device,
                                    description=f"{split} features")
    return out
