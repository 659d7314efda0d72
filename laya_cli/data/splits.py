"""Datasets as tensors with integer labels, and the one rule that splits them into train/val/test.

Split rule (also in docs/datasets.md): the official test split where one exists, else a
stratified 20% test split with a fixed seed (0) so it never moves; validation is a
stratified 10% of the remaining training data, seeded with the run's ``--seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..runtime.errors import LayaError
from .images import LazyImages, take
from .settings import DataSettings


class DataDirMissing(LayaError):
    """A ``--data-dir`` that does not hold the dataset, or that the dataset does not use (an explicit one is
    never silently replaced by another copy)."""


TEST_SPLIT_SEED = 0


class ImageTensorDataset(Dataset):
    """Images kept as uint8 (N, C, H, W) (or float in [0, 1]), or file images decoded as they are
    used (``images.LazyImages``, for data larger than the in-memory budget); served as float in [0, 1]."""

    def __init__(self, images: Tensor | LazyImages, labels: Tensor):
        self.images, self.labels = images, labels.long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i]
        if x.dtype == torch.uint8:
            x = x.float() / 255.0
        elif x.is_floating_point():
            x = x.float()
        return x, self.labels[i]  # integer token batches (text.TokenDataset) stay integers

    def subset(self, index: Tensor) -> ImageTensorDataset:
        return ImageTensorDataset(take(self.images, index), self.labels[index])


@dataclass
class DataSplits:
    train: ImageTensorDataset
    val: ImageTensorDataset
    test: ImageTensorDataset
    classes: list[str]
    name: str
    identity: str  # what the feature cache keys on: name, files, label rule, image size
    skipped: int = 0  # undecodable images left out
    unmatched: list[str] = field(default_factory=list)  # artworks: artist folders that match no row of artists.csv

    @property
    def image_shape(self) -> tuple[int, int, int]:
        if not hasattr(self.train, "images"):  # text before tokenising
            raise LayaError(f"dataset {self.name} holds text, not images")
        return tuple(self.train.images.shape[1:])  # type: ignore[return-value]


def stratified_split(labels: Tensor, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """(kept, held_out) indices; held_out takes ``fraction`` of each class, at least one."""
    g = torch.Generator().manual_seed(seed)
    kept, held = [], []
    for c in labels.unique(sorted=True):
        idx = (labels == c).nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        n = max(1, round(fraction * len(idx))) if len(idx) > 1 else 0
        held.append(idx[:n])
        kept.append(idx[n:])
    return torch.cat(kept).sort().values, torch.cat(held).sort().values


def _finish(
    train: ImageTensorDataset,
    test: ImageTensorDataset,
    classes,
    req: DataSettings,
    identity: str,
    skipped=0,
    unmatched=(),
):
    kept, val = stratified_split(train.labels, 0.1, req.seed)
    return DataSplits(
        train.subset(kept), train.subset(val), test, list(classes), req.name, identity, skipped, list(unmatched)
    )


def _split_test(full: ImageTensorDataset) -> tuple[ImageTensorDataset, ImageTensorDataset]:
    train, test = stratified_split(full.labels, 0.2, TEST_SPLIT_SEED)
    return full.subset(train), full.subset(test)
