"""Training: a head on cached features (frozen backbone) or backbone + head end to end.

Adam, early stopping on validation accuracy with the best weights restored. Same seed,
same result on CPU: initialisation and shuffling both come from ``--seed``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import backbones as bb
from .checkpoint import save_checkpoint
from .data import DataRequest, DataSplits, is_file_dataset, load_dataset
from .errors import LayaError, unknown_choice
from .features import FeatureCache, LayerFeatures, batches, cache_key, cached_extract, extract, to_float_images
from .fileio import check_writable
from .heads import HEADS, HeadConfig, build_head
from .metrics import accuracy, macro_f1
from .model import EndToEnd
from .progress import log, track


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


def fit(model: nn.Module, train: tuple[list[Tensor], Tensor], val: tuple[list[Tensor], Tensor],
        cfg: TrainConfig, on_epoch: Callable[[EpochRecord], None] | None = None) -> list[EpochRecord]:
    """Train ``model(inputs) -> HeadOutput`` with early stopping; restores the best weights."""
    torch.manual_seed(cfg.seed)
    shuffle = torch.Generator().manual_seed(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    (train_x, train_y), (val_x, val_y) = train, val
    best_acc, best_state, since_best, history = -1.0, None, 0, []
    n_batches = (len(train_y) + cfg.batch_size - 1) // cfg.batch_size
    for epoch in range(1, cfg.epochs + 1):
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
            best_acc, since_best = val_acc, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            since_best += 1
        record = EpochRecord(epoch, loss_sum / len(train_y), correct / len(train_y), val_acc,
                             time.perf_counter() - start, improved)
        history.append(record)
        if on_epoch:
            on_epoch(record)
        if since_best >= cfg.patience:
            break
    model.load_state_dict(best_state)
    return history


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
        history = fit(model, to_inputs(data.train), to_inputs(data.val), req.train, on_epoch)
        test_pred = predict(model, [data.test.images], device=dev)
        train_feats = extract(backbone, data.train.images, data.train.labels, device=dev, description="reference")
    else:
        for p in backbone.parameters():
            p.requires_grad_(False)
        split_feats = _frozen_features(backbone, spec, data, req)
        train_feats = split_feats["train"]
        as_inputs = lambda f: (f.feats, f.labels)
        history = fit(head, as_inputs(train_feats), as_inputs(split_feats["val"]), req.train, on_epoch)
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
    return ckpt


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
