"""The sharded feature store: one split's frozen features on disk in fixed-size shards, for data
larger than the in-memory budget (``LAYA_IN_MEMORY_MB``; smaller splits keep the single-file cache).

Layout of ``<cache>/<key>.store/`` (key = ``cache.feature_key``, the same key as a single-file entry):

    shard-00000.safetensors   rows [0, R): tensors layer.0 … layer.{L-1} (R × d_i, the feature dtype)
                              and labels (R, int64); memory-mappable, each tensor readable alone
    shard-00000.sha256        the shard's SHA-256, written after it (a shard without one is redone)
    …
    manifest.json             written last: format, key, rows, rows per shard, layers, dims, dtype,
                              and per shard its file, rows, bytes and SHA-256

Extraction is **resumable**: a killed extraction leaves whole shards (each written atomically, its
checksum after it) and no manifest; the next run keeps every shard whose checksum matches and
extracts the missing or corrupt ones. Under torchrun the ranks extract and write their own shards
(shard k on rank k mod world) in parallel; rank 0 writes the manifest; every rank reads them all.
R is a multiple of the extraction batch, so every row is computed in the batch it would be in
with one process: the store's features equal a one-process (and an in-memory) extraction.

A store with a manifest is complete: when its shards do not match the manifest (missing, resized,
another checksum) that is a one-line error (exit 2) saying to remove the folder; it is never
silently rewritten.

Training reads it shard-wise (``StoredFeatures.epoch_batches``): shuffled mini-batches from a
bounded, seeded shuffle buffer (``LAYA_SHUFFLE_MB``), so memory is flat in the number of samples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..runtime import distributed
from ..runtime.device import to_device
from ..runtime.environment import env
from ..runtime.errors import LayaError
from ..runtime.fileio import atomic_path, atomic_write_bytes, atomic_write_text, file_sha256
from ..runtime.progress import log, track
from .extraction import LayerFeatures, backbone_forward, check_finite, to_float_images

FORMAT = "laya-feature-store"
FORMAT_VERSION = 1
SHARD_MB = 64  # target size of one shard
SHUFFLE_MB = 256  # default shuffle buffer of head training on a store (LAYA_SHUFFLE_MB)
# How features may be stored (training.settings.FEATURE_DTYPES names them for --feature-dtype)
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise LayaError(f"--feature-dtype must be one of {', '.join(TORCH_DTYPES)}, got '{name}'")
    return TORCH_DTYPES[name]


def rows_per_shard(dims: Sequence[int], dtype: str, batch_size: int, shard_mb: float | None = None) -> int:
    """Rows of one shard: about ``SHARD_MB`` (``LAYA_SHARD_MB``), in whole extraction batches."""
    shard_mb = shard_mb or env("LAYA_SHARD_MB", SHARD_MB)
    row = sum(dims) * torch_dtype(dtype).itemsize + 8
    return max(1, int(shard_mb * 2**20 // (row * batch_size))) * batch_size


def shuffle_rows(dims: Sequence[int]) -> int:
    """Rows the shuffle buffer of head training holds (``LAYA_SHUFFLE_MB``, float32 in memory)."""
    mb = env("LAYA_SHUFFLE_MB", SHUFFLE_MB)
    return max(1, int(mb * 2**20 // ((sum(dims) + 2) * 4)))


def shard_name(k: int) -> str:
    return f"shard-{k:05d}.safetensors"


class FeatureStore:
    """A store folder: its manifest (when complete) and its shards."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def complete(self) -> bool:
        return self.manifest_path.is_file()

    def manifest(self) -> dict:
        try:
            doc = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as e:
            raise LayaError(
                f"feature store {self.path}: unreadable manifest ({e}); remove the folder to re-extract"
            ) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("format_version", 99) > FORMAT_VERSION:
            raise LayaError(
                f"feature store {self.path}: not a laya feature store manifest; remove the folder to re-extract"
            )
        return doc

    def _valid_shard(self, k: int) -> bool:
        """A shard written whole: its file and its checksum file agree."""
        data, check = self.path / shard_name(k), self.path / f"shard-{k:05d}.sha256"
        try:
            return data.is_file() and check.is_file() and file_sha256(data) == check.read_text().strip()
        except OSError:
            return False

    def verify(self, key: str) -> dict:
        """The manifest, after checking every shard against it (sharded over torchrun's ranks)."""
        doc = self.manifest()
        problems = []
        if doc.get("key") != key:
            problems.append(f"its manifest is for key {doc.get('key')}, not {key}")
        shards = doc.get("shards", [])
        if sum(s.get("rows", 0) for s in shards) != doc.get("rows"):
            problems.append("its shards' rows do not add up to the manifest's")
        bad = [0.0] * len(shards)
        for k in range(distributed.rank(), len(shards), distributed.world_size()):
            p = self.path / shards[k]["file"]
            if not p.is_file() or p.stat().st_size != shards[k]["bytes"] or file_sha256(p) != shards[k]["sha256"]:
                bad[k] = 1.0
        bad = distributed.all_sum(bad) if shards else []
        first = next((k for k, b in enumerate(bad) if b), None)
        if first is not None:
            what = "is missing" if not (self.path / shards[first]["file"]).is_file() else "does not match its checksum"
            problems.append(
                f"shard {shards[first]['file']} {what} ({int(sum(1 for b in bad if b))} of {len(shards)} shards bad)"
            )
        if problems:
            raise LayaError(
                f"feature store {self.path} does not match its manifest: {problems[0]}; "
                f"remove the folder to re-extract, or use --no-cache"
            )
        return doc


# --------------------------------------------------------------------------- writing (extraction)


@torch.no_grad()
def extract_to_store(
    backbone,
    images,
    labels: Tensor,
    key: str,
    path: Path,
    dims: Sequence[int],
    batch_size: int = 256,
    device: str = "cpu",
    dtype: str = "float32",
    description: str = "features",
) -> StoredFeatures:
    """Extract features into a sharded store (resuming a killed extraction); return the store for reading.

    Every rank extracts and writes shards k ≡ rank (mod world); rank 0 writes the manifest last.
    """
    store = FeatureStore(path)
    if store.complete():
        return StoredFeatures.open(path, key)
    n = len(labels)
    rps = rows_per_shard(dims, dtype, batch_size)
    n_shards = max(1, math.ceil(n / rps))
    tdtype = torch_dtype(dtype)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LayaError(f"cannot create the feature store {path}: {e.strerror or e}") from None
    mine = list(range(distributed.rank(), n_shards, distributed.world_size()))
    todo = [k for k in mine if not store._valid_shard(k)]
    missing = distributed.all_sum([1.0 if k in todo else 0.0 for k in range(n_shards)])
    missing = [k for k, m in enumerate(missing) if m]
    if len(missing) < n_shards:
        first = f"from shard {missing[0]}" if missing else "none left"
        log(
            f"{description}: resuming the feature store {path}: {n_shards - len(missing)} of {n_shards} shards "
            f"already extracted and intact; extracting {len(missing)} ({first})"
        )
    else:
        log(f"{description}: {n:,} rows → feature store {path} ({n_shards} shard(s) of up to {rps:,} rows, {dtype})")
    backbone.eval()
    total = sum(math.ceil((min(n, (k + 1) * rps) - k * rps) / batch_size) for k in todo)
    batches = track(
        _shard_batches(backbone, images, todo, rps, n, batch_size, device),
        description,
        total=total,
        unit="batch",
        of=f"of {batch_size} inputs",
    )
    current, parts = None, []
    for k, feats in batches:
        if current is not None and k != current:
            _write_shard(store, current, parts, labels, rps, tdtype)
            parts = []
        current = k
        check_finite(backbone.layer_names, feats)
        parts.append([f.cpu() for f in feats])
    if current is not None:
        _write_shard(store, current, parts, labels, rps, tdtype)
    distributed.barrier()
    if distributed.is_main():
        _write_manifest(store, key, n, rps, n_shards, list(backbone.layer_names), list(dims), dtype)
    distributed.barrier()
    return StoredFeatures.open(path, key)


def _shard_batches(backbone, images, shards: list[int], rps: int, n: int, batch_size: int, device: str):
    """(shard, features of one batch) for every batch of the given shards, images decoded ahead."""
    from ..data.images import image_ranges

    ranges, owner = [], []
    for k in shards:
        for s in range(k * rps, min(n, (k + 1) * rps), batch_size):
            ranges.append((s, min(s + batch_size, (k + 1) * rps, n)))
            owner.append(k)
    for k, x in zip(owner, image_ranges(images, ranges)):
        yield k, backbone_forward(backbone, to_float_images(to_device(x, device)))


def _write_shard(
    store: FeatureStore, k: int, parts: list[list[Tensor]], labels: Tensor, rps: int, dtype: torch.dtype
) -> None:
    from safetensors.torch import save_file

    layers = [torch.cat(layer) for layer in zip(*parts)]
    rows = len(layers[0])
    tensors = {f"layer.{i}": f.to(dtype).contiguous() for i, f in enumerate(layers)}
    tensors["labels"] = labels[k * rps : k * rps + rows].long().contiguous()
    data = store.path / shard_name(k)
    with atomic_path(data) as tmp:
        save_file(tensors, str(tmp))
    # Checksum last: a kill between the two leaves a shard that is redone.
    atomic_write_bytes(store.path / f"shard-{k:05d}.sha256", file_sha256(data).encode())


def _write_manifest(
    store: FeatureStore, key: str, n: int, rps: int, n_shards: int, layers: list[str], dims: list[int], dtype: str
) -> None:
    shards = []
    for k in range(n_shards):
        p = store.path / shard_name(k)
        if not store._valid_shard(k):
            raise LayaError(
                f"feature store {store.path}: shard {p.name} was not written whole (is the cache folder "
                f"shared by every rank?)"
            )
        shards.append(
            {
                "file": p.name,
                "rows": min(rps, n - k * rps),
                "bytes": p.stat().st_size,
                "sha256": (store.path / f"shard-{k:05d}.sha256").read_text().strip(),
            }
        )
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "key": key,
        "rows": n,
        "rows_per_shard": rps,
        "layers": layers,
        "dims": dims,
        "dtype": dtype,
        "shards": shards,
    }
    atomic_write_text(store.manifest_path, json.dumps(doc, indent=1))
    for stale in store.path.glob(".shard-*.tmp"):  # a killed run's half-written shard (every rank is done now)
        stale.unlink(missing_ok=True)


# --------------------------------------------------------------------------- reading


class StoredFeatures:
    """Features r_1..r_L of a split (or a subset of its rows) read from a store, shard by shard.

    Behaves like ``LayerFeatures`` where the audit, export and training read features: ``len``,
    ``labels``, ``num_layers``, ``batches``, ``subset``, ``mean`` (streamed); ``feats`` reads them
    all into memory (avoid it past the budget). Features come back as float32.
    """

    def __init__(self, path: Path, manifest: dict, rows: Tensor | None = None, labels: Tensor | None = None):
        self.path, self.manifest = Path(path), manifest
        self.rps, self.n_store = manifest["rows_per_shard"], manifest["rows"]
        self.rows = rows  # None: every row in order
        self.labels = labels if labels is not None else self._read_labels()
        if rows is not None and labels is None:
            self.labels = self.labels[rows]

    @classmethod
    def open(cls, path: Path, key: str) -> StoredFeatures:
        return cls(path, FeatureStore(path).verify(key))

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_layers(self) -> int:
        return len(self.manifest["dims"])

    @property
    def dims(self) -> list[int]:
        return list(self.manifest["dims"])

    def _file(self, k: int) -> str:
        return str(self.path / self.manifest["shards"][k]["file"])

    def _read_labels(self) -> Tensor:
        from safetensors import safe_open

        parts = []
        for k in range(len(self.manifest["shards"])):
            with safe_open(self._file(k), framework="pt") as f:
                parts.append(f.get_tensor("labels"))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)

    def read_rows(self, rows: np.ndarray) -> list[Tensor]:
        """Features (float32) of store rows ``rows`` (ascending or not), read shard-wise."""
        from safetensors import safe_open

        rows = np.asarray(rows, dtype=np.int64)
        out = [torch.empty((len(rows), d), dtype=torch.float32) for d in self.dims]
        shard_of = rows // self.rps
        for k in np.unique(shard_of):
            where = np.flatnonzero(shard_of == k)
            local = rows[where] - k * self.rps
            lo, hi = int(local.min()), int(local.max()) + 1
            with safe_open(self._file(int(k)), framework="pt") as f:
                for i in range(self.num_layers):
                    block = f.get_slice(f"layer.{i}")[lo:hi]
                    out[i][torch.from_numpy(where)] = block[torch.from_numpy(local - lo)].float()
        return out

    def _store_rows(self, start: int, stop: int) -> np.ndarray:
        if self.rows is None:
            return np.arange(start, stop)
        return np.asarray(self.rows[start:stop], dtype=np.int64)

    def batches(
        self, batch_size: int, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[list[Tensor], Tensor]]:
        """(features, labels) for rows [start, stop) in order, in slices of ``batch_size``."""
        stop = len(self) if stop is None else stop
        for s in range(start, stop, batch_size):
            e = min(s + batch_size, stop)
            yield self.read_rows(self._store_rows(s, e)), self.labels[s:e]

    def subset(self, index) -> StoredFeatures:
        index = torch.as_tensor(index, dtype=torch.long)
        rows = index if self.rows is None else self.rows[index]
        return StoredFeatures(self.path, self.manifest, rows, self.labels[index])

    def mean(self) -> list[Tensor]:
        """Per-layer means, streamed shard by shard (float64 sums)."""
        sums = [torch.zeros(d, dtype=torch.float64) for d in self.dims]
        for feats, _ in self.batches(self.rps):
            for acc, f in zip(sums, feats):
                acc += f.double().sum(0)
        return [(acc / max(1, len(self))).float() for acc in sums]

    def materialize(self) -> LayerFeatures:
        return LayerFeatures(self.read_rows(self._store_rows(0, len(self))), self.labels)

    @property
    def feats(self) -> list[Tensor]:
        return self.materialize().feats

    # ----------------------------------------------------------------------- shuffled training batches

    def epoch_batches(
        self, batch_size: int, generator: torch.Generator, rank: int = 0, world: int = 1, with_rows: bool = False
    ) -> Iterator[tuple]:
        """One epoch of shuffled mini-batches (features, labels) read shard-wise through a bounded shuffle buffer;
        ``with_rows``: (features, labels, rows), rows the batch's positions in these features (the training row
        indices a frozen network alignment target looks its cached removals up by). The same draws either way.

        Rows are dealt to ranks by shard (shard k to rank k mod world). Each round reads a chunk
        of rows from every one of this rank's shards (so a buffer mixes all shards, e.g. all
        classes of a class-sorted folder), shuffles the buffer and the rows carried over, and yields
        full batches; the last batch of the epoch may be short. When the whole split fits the
        buffer (one process), the epoch is ``randperm(N)`` over all rows, as the in-memory path.
        """
        n = len(self)
        buffer = shuffle_rows(self.dims)
        if world == 1 and n <= buffer:
            if getattr(self, "_held", None) is None:  # within the buffer: read once, kept for the next epochs
                self._held = self.materialize().feats
            feats, labels = self._held, self.labels
            order = torch.randperm(n, generator=generator)
            for s in range(0, n, batch_size):
                idx = order[s : s + batch_size]
                yield ([f[idx] for f in feats], labels[idx], *([idx] if with_rows else []))
            return
        # My positions, grouped by the store shard they live in.
        store_rows = np.arange(n) if self.rows is None else np.asarray(self.rows, dtype=np.int64)
        shard_of = store_rows // self.rps
        groups = [np.flatnonzero(shard_of == k) for k in range(len(self.manifest["shards"])) if k % world == rank]
        groups = [g for g in groups if len(g)]
        if not groups:
            return
        chunk = max(1, buffer // len(groups))
        # Per shard, its rows in a random order, cut into chunks; shards visited in a random order.
        shard_order = torch.randperm(len(groups), generator=generator).tolist()
        chunks = []
        for g in groups:
            perm = g[torch.randperm(len(g), generator=generator).numpy()]
            chunks.append([np.sort(perm[s : s + chunk]) for s in range(0, len(perm), chunk)])
        rounds = max(len(c) for c in chunks)
        carry_x: list[Tensor] | None = None
        carry_y = carry_at = torch.zeros(0, dtype=torch.long)
        for r in range(rounds):
            pos = np.concatenate([chunks[k][r] for k in shard_order if r < len(chunks[k])])
            xs = self.read_rows(store_rows[pos])
            at = torch.from_numpy(pos)
            ys = self.labels[at]
            if carry_x is not None:
                xs, ys = [torch.cat([a, b]) for a, b in zip(carry_x, xs)], torch.cat([carry_y, ys])
                at = torch.cat([carry_at, at])
            order = torch.randperm(len(ys), generator=generator)
            full = len(ys) // batch_size * batch_size
            for s in range(0, full, batch_size):
                idx = order[s : s + batch_size]
                yield ([x[idx] for x in xs], ys[idx], *([at[idx]] if with_rows else []))
            rest = order[full:]
            carry_x, carry_y, carry_at = [x[rest] for x in xs], ys[rest], at[rest]
        if len(carry_y):
            yield (carry_x, carry_y, *([carry_at] if with_rows else []))

    def rows_of_rank(self, rank: int, world: int) -> int:
        store_rows = np.arange(len(self)) if self.rows is None else np.asarray(self.rows, dtype=np.int64)
        return int(np.sum((store_rows // self.rps) % world == rank))
