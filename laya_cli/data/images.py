"""Image files decoded into uint8 tensors: all at once for small data, batch by batch for large.

Every file-based dataset (``folder:``, ``artworks``, ``wds:``, ``parquet:``, ``hf-disk:``) is an
*image source*: N encoded images addressed by row (``open(i)`` gives a path or a binary file
object that PIL reads, ``describe(i)`` names it in messages, ``stamp()`` changes when any of them
does). ``load_images`` turns a source into the images of a dataset:

- **in memory** when the decoded images fit ``LAYA_IN_MEMORY_MB`` (N × 3 × S² bytes; default
  1 GiB): decoded once by DataLoader workers into one uint8 tensor (the path laya always had);
- **streamed** above it: a ``LazyImages`` that decodes rows batch by batch in DataLoader worker
  processes, in order, whenever a backbone pass or a training epoch asks for them. Memory is then
  a few batches per worker, whatever N.

Either way the decoded pixels are the same (one decode function), undecodable images are left
out *before* the split (so the split, and every result, is the same), and the choice is printed.
To know which rows decode without holding them, a streamed source is scanned once (decoded and
thrown away, sharded over torchrun's ranks); the scan's verdict is kept in the cache folder under
the source's stamp, so later jobs on the same files skip it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..runtime import distributed
from ..runtime.environment import cache_dir, env, in_memory_budget_mb
from ..runtime.errors import LayaError
from ..runtime.fileio import digest
from ..runtime.progress import log, track

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
BATCH = 256  # images per decoded batch (and per scanned batch)


class ImageSource(Protocol):
    def __len__(self) -> int: ...

    def open(self, i: int): ...  # a path or a binary file object PIL can read

    def describe(self, i: int) -> str: ...  # how messages name row i

    def stamp(self) -> str: ...  # changes when any image is added, removed or changed


class FileSource:
    """Image files on disk, one per row."""

    def __init__(self, paths: Sequence):
        self.paths = [str(p) for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def open(self, i: int):
        return self.paths[i]

    def describe(self, i: int) -> str:
        return self.paths[i]

    def stamp(self) -> str:
        parts = []
        for p in self.paths:
            try:
                st = os.stat(p)
                parts.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append(f"{p}:missing")
        return digest(files=parts)


def decode_image(src, size: int) -> Tensor:
    """One image -> uint8 3×size×size: PIL, converted to RGB, resized bilinearly (every source, every path). An
    image past Pillow's decompression-bomb size (``Image.MAX_IMAGE_PIXELS``) does not decode: it is one of the
    images counted as undecodable (one line), not Pillow's two-line warning and gigabytes of pixels."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(src) as im:
            im = im.convert("RGB").resize((size, size), Image.BILINEAR)
            return torch.from_numpy(np.asarray(im, dtype=np.uint8).copy()).permute(2, 0, 1)


def _try_decode(source, i: int, size: int) -> tuple[Tensor | None, str]:
    try:
        return decode_image(source.open(i), size), ""
    except Exception as e:  # anything PIL (or reading the bytes) raises: this row does not decode
        return None, type(e).__name__


class _DecodeBatches(Dataset):
    """Item k = the rows ``row_batches[k]`` decoded: (k, uint8 images of the rows that decoded,
    bool mask of those rows, first row that failed or -1, its error). What DataLoader workers run.
    ``keep=False`` (the scan) decodes and throws the pixels away: the images are then None."""

    def __init__(self, source, size: int, row_batches: Sequence[Sequence[int]], keep: bool = True):
        self.source, self.size, self.row_batches, self.keep = source, size, row_batches, keep

    def __len__(self) -> int:
        return len(self.row_batches)

    def __getitem__(self, k: int):
        images, ok, failed, error = [], [], -1, ""
        for r in self.row_batches[k]:
            image, err = _try_decode(self.source, int(r), self.size)
            ok.append(image is not None)
            if image is None and failed < 0:
                failed, error = int(r), err
            elif image is not None and self.keep:
                images.append(image)
        if not self.keep:
            stacked = None
        elif images:
            stacked = torch.stack(images)
        else:
            stacked = torch.zeros((0, 3, self.size, self.size), dtype=torch.uint8)
        return k, stacked, torch.tensor(ok, dtype=torch.bool), failed, error


def _as_is(item):
    return item


def decode_workers(n_files: int) -> int:
    """Worker processes that decode image files: ``LAYA_WORKERS``, else up to 8 for large sources
    (0 below 256 images, where starting workers costs more than it saves), shared by the ranks
    torchrun starts on this machine."""
    workers = env("LAYA_WORKERS")
    if workers is not None:
        return workers
    if n_files < 256:
        return 0
    per_node = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(8, (os.cpu_count() or 1) // per_node - 1))


def pin_loaders() -> bool:
    """Decode workers hand back pinned batches: on machines with CUDA (``LAYA_PIN_MEMORY=0`` turns it off)."""
    return env("LAYA_PIN_MEMORY", True) and torch.cuda.is_available()


def _decoded(source, size: int, row_batches: Sequence[Sequence[int]], keep: bool = True) -> Iterator:
    """The items of ``_DecodeBatches`` in order, decoded by worker processes when there are enough rows."""
    work = _DecodeBatches(source, size, row_batches, keep)
    workers = min(decode_workers(sum(len(b) for b in row_batches)), len(row_batches))
    if not workers:
        return (work[k] for k in range(len(work)))
    # In order (the DataLoader default), two batches in flight per worker; seeded, though decoding draws nothing.
    # Where CUDA is present, batches that are kept arrive in pinned memory (the host-to-device copy is then
    # asynchronous without another copy: device.to_device).
    return iter(
        DataLoader(
            work,
            batch_size=None,
            num_workers=workers,
            collate_fn=_as_is,
            prefetch_factor=2,
            generator=torch.Generator().manual_seed(0),
            pin_memory=keep and pin_loaders(),
        )
    )


def _row_batches(rows: Tensor | np.ndarray, batch: int = BATCH) -> list[np.ndarray]:
    rows = np.asarray(rows, dtype=np.int64)
    return [rows[s : s + batch] for s in range(0, len(rows), batch)]


class LazyImages:
    """uint8 images (N, 3, S, S) of an image source, decoded only when asked for.

    Indexing (``images[i]``, ``images[a:b]``, ``images[index_tensor]``) decodes those rows now, like
    a tensor would give them; ``subset`` is lazy; ``batches``/``take_batches`` decode in worker
    processes, in order. ``rows`` are the source rows these images are (the ones that decoded)."""

    dtype = torch.uint8
    ndim = 4

    def __init__(self, source, rows: Tensor, size: int):
        self.source, self.rows, self.size = source, torch.as_tensor(rows, dtype=torch.long), size

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self), 3, self.size, self.size))

    def __repr__(self) -> str:
        return f"LazyImages({len(self)} × 3×{self.size}×{self.size})"

    def subset(self, index) -> LazyImages:
        return LazyImages(self.source, self.rows[index], self.size)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self._decode(self.rows[int(key)].view(1))[0]
        return self._decode(self.rows[key].reshape(-1))

    def _decode(self, rows: Tensor) -> Tensor:
        parts = [self._check(item) for item in _DecodeBatches(self.source, self.size, _row_batches(rows))]
        return torch.cat(parts) if parts else torch.zeros((0, 3, self.size, self.size), dtype=torch.uint8)

    def _check(self, item) -> Tensor:
        _, images, ok, failed, error = item
        if not ok.all():
            raise LayaError(
                f"cannot decode image {self.source.describe(failed)}: {error} (it decoded when the "
                f"data set was scanned: was it changed since?)"
            )
        return images

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None) -> Iterator[Tensor]:
        """Rows [start, stop) in consecutive batches of ``batch_size``."""
        stop = len(self) if stop is None else stop
        return image_ranges(self, [(s, min(s + batch_size, stop)) for s in range(start, stop, batch_size)])

    def take_batches(self, index_batches: Sequence, source_rows: bool = False) -> Iterator[Tensor]:
        """The images of each index batch (positions in these images), decoded ahead by workers."""
        rows = index_batches if source_rows else [self.rows[torch.as_tensor(b)] for b in index_batches]
        return (self._check(item) for item in _decoded(self.source, self.size, [np.asarray(r) for r in rows]))


def take(images, index):
    """``images[index]`` that stays lazy for ``LazyImages`` (and is a plain index for tensors)."""
    return images.subset(index) if isinstance(images, LazyImages) else images[index]


def image_ranges(images, ranges: Sequence[tuple[int, int]]) -> Iterator[Tensor]:
    """Rows [a, b) of a tensor or of ``LazyImages`` for each (a, b) in ``ranges``."""
    if isinstance(images, LazyImages):
        return images.take_batches([images.rows[a:b] for a, b in ranges], source_rows=True)
    return (images[a:b] for a, b in ranges)


def image_batches(images, batch_size: int, start: int = 0, stop: int | None = None) -> Iterator[Tensor]:
    """Rows [start, stop) of a tensor or of ``LazyImages`` in consecutive batches."""
    if isinstance(images, LazyImages):
        yield from images.batches(batch_size, start, stop)
        return
    stop = len(images) if stop is None else stop
    for s in range(start, stop, batch_size):
        yield images[s : min(s + batch_size, stop)]


# --------------------------------------------------------------------------- loading a source


def load_images(source, size: int, strict: bool, what: str = "images") -> tuple[Tensor | LazyImages, list[int]]:
    """The decodable images of ``source`` (in memory or streamed, by size; the choice printed) and their rows."""
    n = len(source)
    if n == 0:
        raise LayaError("no image found")
    mib = n * 3 * size * size / 2**20
    budget = in_memory_budget_mb()
    if mib <= budget:
        images, kept = _decode_all(source, size, strict)
        return images, kept
    log(
        f"{what}: {n:,} images of 3×{size}×{size} ({_size(mib)}) exceed the in-memory budget "
        f"(LAYA_IN_MEMORY_MB={budget:g}): decoded batch by batch as they are used"
    )
    ok = scan(source, size, strict)
    kept = np.flatnonzero(ok).tolist()
    if not kept:
        raise LayaError("no decodable image found")
    return LazyImages(source, torch.tensor(kept), size), kept


def _size(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.1f} MiB"


def _decode_all(source, size: int, strict: bool) -> tuple[Tensor, list[int]]:
    """Decode every image into one uint8 tensor (in order, by workers for large sources)."""
    images, kept = [], []
    rows = _row_batches(np.arange(len(source)))
    for (_, batch, ok, failed, error), r in zip(_decoded(source, size, rows), rows):
        if failed >= 0 and strict:
            raise LayaError(f"cannot decode image {source.describe(failed)}: {error}")
        images.append(batch)
        kept += r[ok.numpy()].tolist()
    if not kept:
        raise LayaError("no decodable image found")
    return torch.cat(images), kept


def scan(source, size: int, strict: bool) -> np.ndarray:
    """Which rows decode (bool per row): every image decoded once and thrown away, sharded over
    torchrun's ranks; remembered in the cache folder under the source's stamp."""
    key = digest(stamp=source.stamp(), size=size, n=len(source))
    path = cache_dir() / "scans" / f"{key}.json"
    ok = _read_scan(path, len(source))
    if not distributed.all_true(ok is not None):  # every rank scans together unless every rank has it
        ok = _scan(source, size)
        if distributed.is_main():
            _write_scan(path, ok)
    if strict and not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        raise LayaError(f"cannot decode image {source.describe(bad)} (--strict)")
    return ok


def _scan(source, size: int) -> np.ndarray:
    n = len(source)
    start, stop = distributed.shard_bounds(n, BATCH)
    batches = _row_batches(np.arange(start, stop))
    masks = [
        mask
        for _, _, mask, _, _ in track(
            _decoded(source, size, batches, keep=False),
            "scanning images",
            total=len(batches),
            unit="batch",
            of=f"of {BATCH} images",
        )
    ]
    mine = torch.cat(masks) if masks else torch.zeros(0, dtype=torch.bool)
    return distributed.gather_rows(mine, n).numpy()


def _read_scan(path, n: int) -> np.ndarray | None:
    try:
        doc = json.loads(path.read_text())
        ok = np.ones(n, dtype=bool)
        ok[np.asarray(doc["bad"], dtype=np.int64)] = False
        return ok if doc["n"] == n else None
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _write_scan(path, ok: np.ndarray) -> None:
    from ..runtime.fileio import atomic_write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"n": int(len(ok)), "bad": np.flatnonzero(~ok).tolist()}))
    except (LayaError, OSError):
        pass  # costs a rescan next time, nothing else
