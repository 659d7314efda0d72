"""The on-disk feature cache that makes frozen backbones cheap, and its one key.

A frozen backbone's features depend on the backbone (weights, taps, pooling, input
normalisation, precision) and on the rows of the data (data set identity, split, split seed,
which rows). ``feature_key`` is the only place that key is built, so the test features that
``laya train`` extracted are the ones ``laya audit`` and ``laya export`` read back.

Entries are written atomically with a SHA-256 of their bytes beside them; an entry whose
checksum does not match (a killed write, a flipped bit) is ignored and recomputed. A cache that
cannot be written (full disk, read-only folder) costs speed, never the job: laya warns and
goes on.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from .config import digest
from .device import feature_precision
from .distributed import all_true, is_main
from .errors import LayaError
from .features import LayerFeatures, extract
from .fileio import atomic_write_bytes
from .progress import log


def cache_dir() -> Path:
    return Path(os.environ.get("LAYA_CACHE_DIR", Path.home() / ".cache" / "laya" / "features"))


def backbone_identity(backbone) -> dict:
    """What a tapped backbone's features depend on (weights by content, not by name)."""
    from .backbones import state_fingerprint

    adapter = backbone.adapter
    return {"weights": state_fingerprint(backbone.model.state_dict()), "layers": list(backbone.layer_names),
            "pool": backbone.pool,
            "input": [adapter.channels, list(adapter.size or []), adapter.mean.flatten().tolist(),
                      adapter.std.flatten().tolist()]}


def feature_key(backbone, data_identity: str, split: str, split_seed: int | None, rows: int | Sequence[int],
                device) -> str:
    """The cache key of one split's features: ``rows`` = the split's length (all of it) or a list of
    row indices (a subset, as ``--samples`` takes)."""
    rows = rows if isinstance(rows, int) else [int(i) for i in rows]
    if split == "test":
        split_seed = None  # the test split never moves with the run's seed (docs/datasets.md)
    return digest(backbone=backbone_identity(backbone), data=data_identity, split=split, split_seed=split_seed,
                  rows=rows, precision=feature_precision(device) or "float32")


class FeatureCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else cache_dir()

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.root / f"{key}.pt", self.root / f"{key}.sha256"

    def path(self, key: str) -> Path:
        return self._paths(key)[0]

    def load(self, key: str) -> LayerFeatures | None:
        data_path, sum_path = self._paths(key)
        if not (data_path.is_file() and sum_path.is_file()):
            return None
        try:
            data = data_path.read_bytes()
            expected = sum_path.read_text().strip()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != expected:
            log(f"[yellow]feature cache entry {data_path.name} is corrupt; recomputing[/]")
            return None
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return LayerFeatures(list(obj["feats"]), obj["labels"])

    def save(self, key: str, features: LayerFeatures) -> bool:
        """Store an entry; on an OS fault, warn and return False (the job goes on without it)."""
        buf = io.BytesIO()
        torch.save({"feats": features.feats, "labels": features.labels}, buf)
        data = buf.getvalue()
        data_path, sum_path = self._paths(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # Data first, checksum last: a kill between the two leaves an entry that fails verification.
            atomic_write_bytes(data_path, data)
            atomic_write_bytes(sum_path, hashlib.sha256(data).hexdigest().encode())
        except (LayaError, OSError) as e:
            log(f"[yellow]could not write the feature cache ({e}); going on without it[/]")
            return False
        return True


def cached_extract(backbone, images: Tensor, labels: Tensor, key: str, cache: FeatureCache | None,
                   batch_size: int = 256, device: str = "cpu", description: str = "features",
                   fallback: tuple[str, Tensor] | None = None) -> LayerFeatures:
    """Features from the cache when present, else extracted and stored.

    ``fallback``: (key of the whole split, the rows wanted): when the wanted subset has no entry of
    its own but the whole split does, its rows are read from there. Under torchrun every rank reads
    the cache; unless every rank hit, all extract together (sharded) and only rank 0 writes.
    """
    if cache is not None:
        for k, rows in ((key, None), *([fallback] if fallback else [])):
            hit = cache.load(k)
            if hit is not None and rows is not None:
                hit = hit.subset(rows) if len(rows) and len(hit) > int(rows.max()) else None
            ok = hit is not None and len(hit) == len(labels) and torch.equal(hit.labels, labels.long())
            if all_true(ok):
                log(f"reusing cached {description} ({cache.path(k)})")
                return hit
    feats = extract(backbone, images, labels, batch_size, device, description)
    if cache is not None and is_main():
        cache.save(key, feats)
    return feats
