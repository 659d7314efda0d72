"""Reading a user's DataLoaders (``laya_cli.fit``, ``audit``, ``export``, ``depth``): batches checked as the model
takes them, features extracted once (or kept in the on-disk feature cache, keyed by the samples' content),
images read into memory, class names."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from .. import backbones as bb
from ..runtime import progress
from ..runtime.errors import LayaError
from .attach import Tapped
from .cache import FeatureCache, feature_key
from .extraction import LayerFeatures, extract_batches, model_batch

# A DataLoader, or any iterable of (images, labels) batches: images B×C×H×W float (or uint8)
# tensors, labels B integer classes.
Loader = Iterable[Any]


def loader_batches(
    loader: Loader, where: str, tapped: Tapped | None = None, text: bb.TextInput | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(images, labels)`` of each batch, checked; a text model's (``tapped``'s, or ``text``) B×2×L tokens."""
    try:
        iterator = iter(loader)
    except TypeError:
        raise LayaError(
            f"{where} must be a DataLoader (or an iterable of (images, labels)); got {type(loader).__name__}"
        ) from None
    for batch in iterator:
        images, labels = model_batch(batch, where, tapped._cfg if tapped is not None else text)
        if tapped is not None:
            tapped._bind(images)
        yield images, labels


def text_input_of(backbone) -> bb.TextInput | None:
    return backbone.input_cfg if isinstance(backbone.input_cfg, bb.TextInput) else None


def loader_length(loader: Loader) -> int | None:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def sample_digests(images: Tensor, labels: Tensor) -> list[bytes]:
    """SHA-256 of each (image, label): its dtype, shape, bytes and class."""
    x = images.detach().cpu().contiguous()
    head = f"{x.dtype}{tuple(x.shape[1:])}".encode()
    return [
        hashlib.sha256(
            head
            + x[i].reshape(-1).view(torch.uint8).numpy().tobytes()
            + int(labels[i]).to_bytes(8, "little", signed=True)
        ).digest()
        for i in range(len(x))
    ]


def _order(have: list[bytes], want: list[bytes]) -> Tensor:
    """Row indices into ``have`` that list its rows in the order of ``want`` (the same multiset)."""
    rows: dict[bytes, list[int]] = {}
    for i, d in enumerate(have):
        rows.setdefault(d, []).append(i)
    return torch.tensor([rows[d].pop() for d in want], dtype=torch.long)


def read_features(tapped: Tapped, loader: Loader, device: str, what: str, use_cache: bool) -> LayerFeatures:
    """Features of every sample the loader yields, extracted once, or (``use_cache``: ``--cache``) also kept in
    the on-disk feature cache, keyed by the backbone and the samples' content."""
    where = f"the {what} loader"
    if not use_cache:
        feats, _ = extract_batches(
            tapped.backbone, loader_batches(loader, where, tapped), device, f"{what} features", loader_length(loader)
        )
        return feats
    # disk: one pass hashes every (image, label); a hit skips the backbone. Entries hold their rows in
    # the order of the hashes, so a shuffling loader finds its entry too; what is returned is in the
    # order of that first pass, as "memory" would give it (the same model either way).
    digests: list[bytes] = []
    for images, labels in progress.track(
        loader_batches(loader, where, tapped), f"hashing {what} data", loader_length(loader), unit="batch"
    ):
        digests += sample_digests(images, labels)
    if not digests:
        raise LayaError(f"{where} yielded no batches")
    identity = "loader:" + hashlib.sha256(b"".join(sorted(digests))).hexdigest()
    key = feature_key(tapped.backbone, identity, "loader", None, len(digests), device)
    store = FeatureCache()
    hit = store.load(key)
    if hit is not None and len(hit) == len(digests):
        progress.log(f"reusing cached {what} features ({store.path(key)})")
        return hit.subset(_order(sorted(digests), digests))
    seen: list[bytes] = []

    def hashed() -> Iterator[tuple[Tensor, Tensor]]:
        for images, labels in loader_batches(loader, where, tapped):
            seen.extend(sample_digests(images, labels))
            yield images, labels

    feats, _ = extract_batches(tapped.backbone, hashed(), device, f"{what} features", loader_length(loader))
    if sorted(seen) != sorted(digests):
        progress.log(
            f"[yellow]{where} yields different samples on every pass (random transforms?): "
            f"its features are not cached on disk[/]"
        )
        return feats
    store.save(key, feats.subset(_order(seen, sorted(digests))))
    return feats.subset(_order(seen, digests))


def read_images(loader: Loader, what: str, tapped: Tapped) -> tuple[Tensor, Tensor]:
    images, labels = [], []
    for x, y in progress.track(
        loader_batches(loader, f"the {what} loader", tapped),
        f"reading {what} data",
        loader_length(loader),
        unit="batch",
    ):
        images.append(x.cpu())
        labels.append(y.cpu())
    if not images:
        raise LayaError(f"the {what} loader yielded no batches")
    return torch.cat(images), torch.cat(labels)


def class_names(classes: Sequence[str] | None, loader: Loader, labels: Sequence[Tensor]) -> list[str]:
    top = max(int(y.max()) for y in labels if len(y)) + 1
    low = min(int(y.min()) for y in labels if len(y))
    if low < 0:
        raise LayaError(f"class labels must be 0..C-1; the loader yields {low}")
    if classes is None:
        classes = getattr(getattr(loader, "dataset", None), "classes", None)
    if classes is None:
        return [str(c) for c in range(max(top, 2))]
    names = [str(c) for c in classes]
    if top > len(names):
        raise LayaError(f"the loader yields class {top - 1} but there are only {len(names)} class names")
    return names


def describe_loader(loader: Loader) -> str:
    dataset = getattr(loader, "dataset", None)
    what = type(dataset).__name__ if dataset is not None else type(loader).__name__
    n = loader_length(dataset) if dataset is not None else None
    return f"DataLoader over {what}" + (f" ({n} samples)" if n is not None else "")
