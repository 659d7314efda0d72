"""Per-layer feature extraction, and the on-disk cache that makes frozen backbones cheap.

A cache entry is keyed by (backbone weights, taps, pooling, input config, dataset identity,
split). It is written atomically with a SHA-256 of its bytes beside it; an entry whose
checksum does not match (a killed write, a flipped bit) is ignored and recomputed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import Tensor

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


def batches(tensors: Sequence[Tensor], batch_size: int, generator: torch.Generator | None = None) -> Iterator[list[Tensor]]:
    """Slices of aligned tensors; shuffled when a generator is given."""
    n = len(tensors[0])
    order = torch.randperm(n, generator=generator) if generator is not None else None
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size] if order is not None else slice(start, start + batch_size)
        yield [t[idx] for t in tensors]


def to_float_images(x: Tensor) -> Tensor:
    return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


@torch.no_grad()
def extract(backbone, images: Tensor, labels: Tensor, batch_size: int = 256, device: str = "cpu",
            description: str = "features") -> LayerFeatures:
    """Run the tapped backbone over all images; features are kept on the CPU in float32."""
    backbone.eval()
    chunks: list[list[Tensor]] = []
    n_batches = (len(images) + batch_size - 1) // batch_size
    for (x,) in track(batches([images], batch_size), description, total=n_batches):
        feats = backbone(to_float_images(x).to(device))
        chunks.append([f.float().cpu() for f in feats])
    feats = [torch.cat(layer) for layer in zip(*chunks)]
    for name, f in zip(backbone.layer_names, feats):
        if not torch.isfinite(f).all():
            raise LayaError(f"layer {name} produced NaN or Inf features; check the weights and inputs")
    return LayerFeatures(feats, labels.clone())


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
    """Features from the cache when present, else extracted and stored."""
    if cache is not None:
        hit = cache.load(key)
        if hit is not None and len(hit) == len(labels):
            log(f"reusing cached {description} ({cache.root / key}.pt)")
            return hit
    feats = extract(backbone, images, labels, batch_size, device, description)
    if cache is not None:
        cache.save(key, feats)
    return feats
