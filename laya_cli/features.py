"""Per-layer feature extraction, and the on-disk cache that makes frozen backbones cheap.

A cache entry is keyed by (backbone weights, taps, pooling, input config, dataset identity,
split). It is written atomically with a SHA-256 of its bytes beside it; an entry whose
checksum does not match (a killed write, a flipped bit) is ignored and recomputed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import Tensor

from .distributed import active, all_true, gather_rows, is_main, shard_bounds
from .errors import LayaError
from .fileio import atomic_write_bytes
from .progress import log, track


@dataclass
class LayerFeatures:
    """r_1..r_L for N samples (each N×d_i), with their labels."""

    feats: list[Tensor]
    labels: Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: Tensor) -> "LayerFeatures":
        return LayerFeatures([f[index] for f in self.feats], self.labels[index])

    def mean(self) -> list[Tensor]:
        return [f.float().mean(0) for f in self.feats]

    @property
    def num_layers(self) -> int:
        return len(self.feats)

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[list[Tensor], Tensor]]:
        """(features, labels) for rows [start, stop) in slices of ``batch_size`` (on the CPU)."""
        stop = len(self) if stop is None else stop
        for s in range(start, stop, batch_size):
            e = min(s + batch_size, stop)
            yield [f[s:e] for f in self.feats], self.labels[s:e]


def batches(tensors: Sequence[Tensor], batch_size: int, generator: torch.Generator | None = None) -> Iterator[list[Tensor]]:
    """Slices of aligned tensors; shuffled when a generator is given."""
    n = len(tensors[0])
    order = torch.randperm(n, generator=generator) if generator is not None else None
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size] if order is not None else slice(start, start + batch_size)
        yield [t[idx] for t in tensors]


def to_float_images(x: Tensor) -> Tensor:
    return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


def bf16_enabled(device) -> bool:
    """bf16 autocast for backbone passes: on CUDA only (and bf16-capable), unless LAYA_BF16=0."""
    if not str(device).startswith("cuda") or os.environ.get("LAYA_BF16", "1") == "0":
        return False
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def feature_precision(device) -> str | None:
    """What the feature cache must key on besides the weights: 'bf16' on CUDA, None for float32."""
    return "bf16" if bf16_enabled(device) else None


def backbone_forward(backbone, x: Tensor) -> list[Tensor]:
    """Tapped backbone pass; under bf16 autocast on CUDA, features cast back to float32."""
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if bf16_enabled(x.device) else contextlib.nullcontext()
    with ctx:
        feats = backbone(x)
    return [f.float() for f in feats]


def to_device(x: Tensor, device) -> Tensor:
    """Host-to-device copy; pinned and asynchronous on CUDA."""
    if str(device).startswith("cuda") and x.device.type == "cpu":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


def _check_finite(names: Sequence[str], feats: Sequence[Tensor]) -> None:
    for name, f in zip(names, feats):
        if not torch.isfinite(f).all():
            raise LayaError(f"layer {name} produced NaN or Inf features; check the weights and inputs")


@torch.no_grad()
def extract(backbone, images: Tensor, labels: Tensor, batch_size: int = 256, device: str = "cpu",
            description: str = "features", shard: bool = True) -> LayerFeatures:
    """Run the tapped backbone over all images; features are kept on the CPU in float32.

    Under torchrun (``shard``) each rank extracts its own contiguous whole batches and the
    features are gathered back in order on every rank (docs/scaling.md).
    """
    backbone.eval()
    n = len(images)
    start, stop = shard_bounds(n, batch_size) if shard else (0, n)
    chunks: list[list[Tensor]] = []
    n_batches = (stop - start + batch_size - 1) // batch_size
    for (x,) in track(batches([images[start:stop]], batch_size), description, total=n_batches):
        feats = backbone_forward(backbone, to_float_images(to_device(x, device)))
        chunks.append([f.cpu() for f in feats])
    if chunks:
        feats = [torch.cat(layer) for layer in zip(*chunks)]
    elif n:  # an empty shard still needs the right widths to take part in the gather
        dims = backbone.dims(to_float_images(to_device(images[:1], device)))
        feats = [torch.zeros(0, d) for d in dims]
    else:
        feats = []
    if shard and active():
        feats = gather_rows(feats, n)
    _check_finite(backbone.layer_names, feats)
    return LayerFeatures(feats, labels.clone())


class StreamedFeatures:
    """Features r_1..r_L computed from the images batch by batch, never all held at once.

    What ``laya audit``/``laya export`` use when there is no feature cache (fine-tuned
    built-ins, ``--no-cache``): memory then stays at one batch of features however many
    samples are audited. Reading ``.feats`` materialises everything (compatibility).
    """

    def __init__(self, backbone, images: Tensor, labels: Tensor, device: str = "cpu", backbone_batch: int = 256):
        self.backbone, self.images, self.labels, self.device = backbone, images, labels, device
        self.backbone_batch = backbone_batch  # images per backbone pass (bounds activation memory)
        self._full: LayerFeatures | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_layers(self) -> int:
        return len(self.backbone.layer_names)

    @torch.no_grad()
    def batches(self, batch_size: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[list[Tensor], Tensor]]:
        """(features on the device, labels) for rows [start, stop) in slices of ``batch_size``."""
        self.backbone.eval()
        stop = len(self) if stop is None else stop
        for s in range(start, stop, batch_size):
            e = min(s + batch_size, stop)
            parts = [backbone_forward(self.backbone, to_float_images(to_device(self.images[i:min(i + self.backbone_batch, e)],
                                                                               self.device)))
                     for i in range(s, e, self.backbone_batch)]
            feats = parts[0] if len(parts) == 1 else [torch.cat(layer) for layer in zip(*parts)]
            _check_finite(self.backbone.layer_names, feats)
            yield feats, self.labels[s:e]

    def materialize(self) -> LayerFeatures:
        if self._full is None:
            self._full = extract(self.backbone, self.images, self.labels, device=self.device, shard=False)
        return self._full

    @property
    def feats(self) -> list[Tensor]:
        return self.materialize().feats

    def subset(self, index: Tensor) -> "StreamedFeatures":
        return StreamedFeatures(self.backbone, self.images[index], self.labels[index], self.device, self.backbone_batch)

    def mean(self) -> list[Tensor]:
        return self.materialize().mean()


def feature_batches(feats, batch_size: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[list[Tensor], Tensor]]:
    """(features, labels) in batches over rows [start, stop) of LayerFeatures, StreamedFeatures or alike."""
    stop = len(feats) if stop is None else stop
    if hasattr(feats, "batches"):
        yield from feats.batches(batch_size, start, stop)
        return
    for s in range(start, stop, batch_size):
        e = min(s + batch_size, stop)
        yield [f[s:e] for f in feats.feats], feats.labels[s:e]


def num_layers(feats) -> int:
    n = getattr(feats, "num_layers", None)
    return n if n is not None else len(feats.feats)


def cache_dir() -> Path:
    return Path(os.environ.get("LAYA_CACHE_DIR", Path.home() / ".cache" / "laya" / "features"))


def cache_key(**parts) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class FeatureCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else cache_dir()

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.root / f"{key}.pt", self.root / f"{key}.sha256"

    def load(self, key: str) -> LayerFeatures | None:
        data_path, sum_path = self._paths(key)
        if not (data_path.is_file() and sum_path.is_file()):
            return None
        data = data_path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sum_path.read_text().strip():
            log(f"[yellow]feature cache entry {data_path.name} is corrupt; recomputing[/]")
            return None
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return LayerFeatures(list(obj["feats"]), obj["labels"])

    def save(self, key: str, features: LayerFeatures) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save({"feats": features.feats, "labels": features.labels}, buf)
        data = buf.getvalue()
        data_path, sum_path = self._paths(key)
        # Data first, checksum last: a kill between the two leaves an entry that fails verification.
        atomic_write_bytes(data_path, data)
        atomic_write_bytes(sum_path, hashlib.sha256(data).hexdigest().encode())


def cached_extract(backbone, images: Tensor, labels: Tensor, key: str, cache: FeatureCache | None,
                   batch_size: int = 256, device: str = "cpu", description: str = "features") -> LayerFeatures:
    """Features from the cache when present, else extracted and stored.

    Under torchrun every rank reads the cache; unless every rank hit, all extract together
    (sharded) and only rank 0 writes the entry.
    """
    if cache is not None:
        hit = cache.load(key)
        ok = hit is not None and len(hit) == len(labels)
        if all_true(ok):
            log(f"reusing cached {description} ({cache.root / key}.pt)")
            return hit
    feats = extract(backbone, images, labels, batch_size, device, description)
    if cache is not None and is_main():
        cache.save(key, feats)
    return feats
