"""The on-disk feature cache that makes frozen backbones cheap, and its one key.

A frozen backbone's features depend on the backbone (weights, taps, pooling, input
normalisation, precision), on the rows of the data (data set identity, split, split seed,
which rows) and on the dtype they are stored in. ``feature_key`` is the only place that key is
built, so the test features that ``laya train`` extracted are the ones ``laya audit`` and
``laya export`` read back.

Two kinds of entry share that key, chosen by size (the choice is printed): a split whose features
fit the in-memory budget (``LAYA_IN_MEMORY_MB``) is one file, ``<key>.pt``, loaded whole; a
larger one is a sharded store, ``<key>.store/`` (``store.py``), read shard by shard.

Entries are written atomically with a SHA-256 of their bytes beside them; an entry whose
checksum does not match (a killed write, a flipped bit) is ignored and recomputed. A cache that
cannot be written (full disk, read-only folder) costs speed, never the job: laya warns and
goes on.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..runtime.device import feature_precision
from ..runtime.distributed import all_true, is_main
from ..runtime.environment import cache_dir, in_memory_budget_mb
from ..runtime.errors import LayaError
from ..runtime.fileio import atomic_write_bytes, digest
from ..runtime.progress import log
from .extraction import LayerFeatures, backbone_forward, extract, to_float_images
from .store import FeatureStore, StoredFeatures, extract_to_store, torch_dtype

__all__ = ["cache_dir", "feature_key", "FeatureCache", "cached_extract", "backbone_identity"]


def backbone_identity(backbone) -> dict:
    """What a tapped backbone's features depend on (weights by content, not by name)."""
    from ..backbones.build import state_fingerprint

    adapter = backbone.adapter
    # r_i packed with the tap's positions (--alpha-reader positions) are other features; pooled keys stay as they were
    positions = {"positions": "grid8-v1"} if getattr(backbone, "read_positions", False) else {}
    return {
        **positions,
        "weights": state_fingerprint(backbone.model.state_dict()),
        "layers": list(backbone.layer_names),
        "pool": backbone.pool,
        # how each tap is pooled (NCHW, NHWC, NLC+P…): entries from before declared formats (Swin pooled
        # over H instead of C) must not be read back as if they were right
        "formats": list(getattr(backbone, "tap_formats", [])),
        # images: the same list as before text backbones (existing cache keys stay valid); text: the tokenizer
        "input": list(adapter.record().values())
        if hasattr(adapter, "text")
        else [
            adapter.channels,
            list(adapter.size or []),
            adapter.mean.flatten().tolist(),
            adapter.std.flatten().tolist(),
        ],
    }


def feature_key(
    backbone,
    data_identity: str,
    split: str,
    split_seed: int | None,
    rows: int | Sequence[int],
    device,
    dtype: str = "float32",
) -> str:
    """The cache key of one split's features: ``rows`` = the split's length (all of it) or a list of
    row indices (a subset, as ``--samples`` takes); ``dtype`` = how they are stored (``--feature-dtype``)."""
    rows = rows if isinstance(rows, int) else [int(i) for i in rows]
    if split == "test":
        split_seed = None  # the test split never moves with the run's seed (docs/datasets.md)
    extra = {} if dtype == "float32" else {"dtype": dtype}  # float32 keys are the keys laya always had
    return digest(
        backbone=backbone_identity(backbone),
        data=data_identity,
        split=split,
        split_seed=split_seed,
        rows=rows,
        precision=feature_precision(device) or "float32",
        **extra,
    )


class FeatureCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else cache_dir()

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.root / f"{key}.pt", self.root / f"{key}.sha256"

    def path(self, key: str) -> Path:
        return self._paths(key)[0]

    def store_path(self, key: str) -> Path:
        return self.root / f"{key}.store"

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
            log(f"feature cache entry {data_path.name} is corrupt; recomputing", "yellow")
            return None
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return LayerFeatures([f.float() for f in obj["feats"]], obj["labels"])  # float16/bf16 entries: float32

    def save(self, key: str, features: LayerFeatures, dtype: str = "float32") -> bool:
        """Store an entry; on an OS fault, warn and return False (the job goes on without it)."""
        buf = io.BytesIO()
        feats = features.feats if dtype == "float32" else [f.to(torch_dtype(dtype)) for f in features.feats]
        torch.save({"feats": feats, "labels": features.labels}, buf)
        data = buf.getvalue()
        data_path, sum_path = self._paths(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # Data first, checksum last: a kill between the two leaves an entry that fails verification.
            atomic_write_bytes(data_path, data)
            atomic_write_bytes(sum_path, hashlib.sha256(data).hexdigest().encode())
        except (LayaError, OSError) as e:
            log(f"could not write the feature cache ({e}); going on without it", "yellow")
            return False
        return True


def cached_extract(
    backbone,
    images: Tensor,
    labels: Tensor,
    key: str,
    cache: FeatureCache | None,
    batch_size: int = 256,
    device: str = "cpu",
    description: str = "features",
    fallback: tuple[str, Tensor] | None = None,
    dtype: str = "float32",
):
    """Features from the cache when present, else extracted and stored: ``LayerFeatures`` in memory, or
    ``StoredFeatures`` read from a sharded store when the split is larger than the in-memory budget.

    ``fallback``: (key of the whole split, the rows wanted): when the wanted subset has no entry of
    its own but the whole split does, its rows are read from there. Under torchrun every rank reads
    the cache; unless every rank hit, all extract together (sharded: into memory, then rank 0 writes
    the entry; or each rank writing its own shards of the store).
    """
    if cache is not None:
        for k, rows in ((key, None), *([fallback] if fallback else [])):
            hit = None
            if all_true(FeatureStore(cache.store_path(k)).complete()):
                hit = StoredFeatures.open(cache.store_path(k), k)  # a store that fails its manifest: exit 2
                where = cache.store_path(k)
            else:
                hit, where = cache.load(k), cache.path(k)
            if hit is not None and rows is not None:
                hit = hit.subset(rows) if len(rows) and len(hit) > int(rows.max()) else None
            ok = hit is not None and len(hit) == len(labels) and torch.equal(hit.labels, labels.long())
            if all_true(ok):
                log(f"reusing cached {description} ({where})")
                return hit
    n = len(labels)
    store_path = cache.store_path(key) if cache is not None else None
    if n and cache is not None:
        backbone.eval()  # as extract() runs it: BatchNorm must neither see a batch of one nor update its statistics
        with torch.no_grad():  # the layer widths, from one image (any tapped backbone)
            dims = [f.shape[1] for f in backbone_forward(backbone, to_float_images(images[:1]).to(device))]
        mib, budget = n * sum(dims) * 4 / 2**20, in_memory_budget_mb()
        resuming = all_true(store_path.is_dir())  # a killed store extraction: finish it
        if mib > budget or resuming:
            if not resuming:
                log(
                    f"{description}: {n:,} × {sum(dims):,} features ({mib:,.1f} MiB as float32) exceed the in-memory "
                    f"budget (LAYA_IN_MEMORY_MB={budget:g}): sharded feature store, read shard by shard"
                )
            return extract_to_store(
                backbone, images, labels, key, store_path, dims, batch_size, device, dtype, description
            )
        log(
            f"{description}: {n:,} × {sum(dims):,} features ({mib:,.1f} MiB) held in memory "
            f"(≤ LAYA_IN_MEMORY_MB={budget:g}), single-file cache entry"
        )
    feats = extract(backbone, images, labels, batch_size, device, description)
    if dtype != "float32":  # what a stored entry gives back, whichever kind of entry
        feats = LayerFeatures([f.to(torch_dtype(dtype)).float() for f in feats.feats], feats.labels)
    if cache is not None and is_main():
        cache.save(key, feats, dtype)
    return feats
