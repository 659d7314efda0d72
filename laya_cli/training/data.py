"""What a training run learns from: a dataset's splits (``laya train``) or the user's DataLoaders
(``laya_cli.fit``). Both answer the few questions the training job asks (``TrainingData``): the class names,
one example input, each split's frozen features or images, and the checkpoint's dataset record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from ..data.datasets import USER_DATASET, DataSplits
from ..data.pinning import pinned
from ..data.splits import stratified_split
from ..features.attach import Tapped
from ..features.cache import FeatureCache, cached_extract, feature_key
from ..features.extraction import LayerFeatures
from ..features.loaders import Loader, class_names, describe_loader, loader_batches, read_features, read_images
from ..runtime.errors import LayaError
from .settings import TrainJobSettings

SPLITS = ("train", "val", "test")


class TrainingData(Protocol):
    classes: list[str]

    def example(self) -> Tensor:
        """At least one input as the backbone takes it (an image, or a text's B×2×L tokens)."""

    def features(self, job, split: str):
        """The frozen backbone's features of ``split`` (``LayerFeatures``, or ``StoredFeatures`` from a sharded
        store); None for a test split the data does not have."""

    def images(self, split: str) -> tuple[Tensor, Tensor] | None:
        """(inputs, labels) of ``split``; None for a test split the data does not have."""

    def record(self) -> dict:
        """The checkpoint's ``dataset``: where the data came from, and how to load it again."""


def from_store(data) -> bool:
    """Whether ``data`` are features read batch by batch from a sharded store (``StoredFeatures``)."""
    return hasattr(data, "epoch_batches")


class DatasetData:
    """``laya train``: a dataset's splits as ``load_dataset`` made them (and ``tokenize_splits`` for text);
    frozen features go through the on-disk feature cache, keyed by the dataset's identity."""

    def __init__(self, data: DataSplits, req: TrainJobSettings):
        self.data, self.req, self.classes = data, req, list(data.classes)

    def example(self) -> Tensor:
        return self.data.train.images[:1]

    def features(self, job, split: str):
        ds, req = getattr(self.data, split), self.req
        dev = req.train.device
        key = feature_key(job.backbone, self.data.identity, split, req.data.seed, len(ds), dev, req.feature_dtype)
        cache = FeatureCache() if req.use_cache else None
        description = f"{split} features"
        return cached_extract(
            job.backbone, ds.images, ds.labels, key, cache, device=dev, description=description, dtype=req.feature_dtype
        )

    def images(self, split: str) -> tuple[Tensor, Tensor]:
        ds = getattr(self.data, split)
        return ds.images, ds.labels

    def record(self) -> dict:
        req = self.req.data
        return {
            "name": req.name,
            "data_dir": req.data_dir,
            "image_size": req.image_size,
            "label": req.label,
            "seed": req.seed,
            "unmatched": list(self.data.unmatched),
            **{k: getattr(req, k) for k, v in req.LATER.items() if getattr(req, k) != v},
            **pinned(req.name, req.data_dir, self.data.test),  # where the data was, and its test split's fingerprint
        }


class LoaderData:
    """``laya_cli.fit``: the user's DataLoaders, each read once in its own order — as features of the frozen
    backbone (held in memory, or also in the on-disk cache keyed by the samples' content: ``use_cache``), or as
    inputs for end-to-end training. Without a validation loader a stratified ``val_fraction`` of the training
    samples is held out, drawn with ``seed`` (as ``laya train`` does)."""

    def __init__(
        self,
        tapped: Tapped,
        loaders: dict[str, Loader | None],
        *,
        frozen: bool,
        val_fraction: float,
        seed: int,
        classes: Sequence[str] | None,
        use_cache: bool,
        device: str,
    ):
        self.tapped, self.loaders, self.frozen = tapped, loaders, frozen
        self.val_fraction, self.seed, self.names, self.device = val_fraction, seed, classes, device
        self.use_cache = use_cache
        self._splits: dict | None = None
        self._first = first_images(loaders["train"], tapped)  # binds the input: taps a model defers to its first batch

    def example(self) -> Tensor:
        return self._first[:1]

    @property
    def classes(self) -> list[str]:
        return self._read()["classes"]

    def features(self, job, split: str) -> LayerFeatures | None:
        return self._read()[split]

    def images(self, split: str) -> tuple[Tensor, Tensor] | None:
        return self._read()[split]

    def record(self) -> dict:
        return {
            "name": USER_DATASET,
            "data_dir": None,
            "image_size": None,
            "label": None,
            "seed": self.seed,
            "unmatched": [],
            "source": describe_loader(self.loaders["train"]),
        }

    def _read(self) -> dict:
        """Every loader, once: features when frozen, else the inputs themselves; then the held-out split."""
        if self._splits is not None:
            return self._splits
        torch.manual_seed(self.seed)  # the loaders' shuffling (a DataLoader draws its order from torch's RNG)
        read = lambda split: (
            read_features(self.tapped, self.loaders[split], self.device, split, self.use_cache)
            if self.frozen
            else read_images(self.loaders[split], split, self.tapped)
        )
        got = {split: read(split) for split in SPLITS if self.loaders.get(split) is not None}
        if "val" not in got:
            train = got["train"]
            labels = train.labels if self.frozen else train[1]
            kept, held = stratified_split(labels, self.val_fraction, self.seed)
            got["train"], got["val"] = (
                (train.subset(kept), train.subset(held))
                if self.frozen
                else ((train[0][kept], train[1][kept]), (train[0][held], train[1][held]))
            )
        labels = [got[s].labels if self.frozen else got[s][1] for s in got]
        got["classes"] = class_names(self.names, self.loaders["train"], labels)
        got.setdefault("test", None)
        self._splits = got
        return got


def first_images(loader: Loader, tapped: Tapped) -> Tensor:
    """The first batch's inputs; binding the input to them chooses the taps a model defers to its first batch."""
    first = next(loader_batches(loader, "the train loader", tapped), None)
    if first is None:
        raise LayaError("the train loader yielded no batches")
    return first[0]
