"""Per-layer features r_1..r_L: extracted all at once (``extract``) or streamed batch by batch
(``StreamedFeatures``). The on-disk cache of extracted features is ``cache.py``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.images import image_batches, image_ranges, take
from ..runtime.device import autocast, to_device
from ..runtime.distributed import active, gather_rows, shard_bounds
from ..runtime.errors import LayaError
from ..runtime.progress import track


@dataclass
class LayerFeatures:
    """r_1..r_L for N samples (each N×d_i), with their labels."""

    feats: list[Tensor]
    labels: Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: Tensor) -> LayerFeatures:
        return LayerFeatures([f[index] for f in self.feats], self.labels[index])

    def mean(self) -> list[Tensor]:
        return [f.float().mean(0) for f in self.feats]

    @property
    def num_layers(self) -> int:
        return len(self.feats)

    def batches(
        self, batch_size: int, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[list[Tensor], Tensor]]:
        """(features, labels) for rows [start, stop) in slices of ``batch_size`` (on the CPU)."""
        stop = len(self) if stop is None else stop
        for s in range(start, stop, batch_size):
            e = min(s + batch_size, stop)
            yield [f[s:e] for f in self.feats], self.labels[s:e]


def batches(
    tensors: Sequence[Tensor], batch_size: int, generator: torch.Generator | None = None
) -> Iterator[list[Tensor]]:
    """Slices of aligned tensors; shuffled when a generator is given. Streamed file images
    (``LazyImages``) among them are decoded ahead by worker processes, batch by batch."""
    n = len(tensors[0])
    order = torch.randperm(n, generator=generator) if generator is not None else None
    index = [
        order[s : s + batch_size] if order is not None else torch.arange(s, min(s + batch_size, n))
        for s in range(0, n, batch_size)
    ]
    streams = [t.take_batches(index) if hasattr(t, "take_batches") else None for t in tensors]
    for k, idx in enumerate(index):
        if order is None:
            idx = slice(k * batch_size, (k + 1) * batch_size)
        yield [next(st) if st is not None else t[idx] for t, st in zip(tensors, streams)]


def to_float_images(x: Tensor) -> Tensor:
    """Images as float in [0, 1] (uint8 scaled); B×2×L integer token batches (text) stay as they are."""
    if x.dtype == torch.uint8:
        return x.float() / 255.0
    if not x.is_floating_point() and x.ndim == 3:
        return x
    return x.float()


def backbone_forward(backbone, x: Tensor) -> list[Tensor]:
    """Tapped backbone pass; under bf16 autocast on CUDA, features cast back to float32."""
    with autocast(x.device):
        feats = backbone(x)
    return [f.float() for f in feats]


def check_finite(names: Sequence[str], feats: Sequence[Tensor]) -> None:
    for name, f in zip(names, feats):
        if not torch.isfinite(f).all():
            raise LayaError(f"layer {name} produced NaN or Inf features; check the weights and inputs")


@torch.no_grad()
def extract(
    backbone,
    images: Tensor,
    labels: Tensor,
    batch_size: int = 256,
    device: str = "cpu",
    description: str = "features",
    shard: bool = True,
) -> LayerFeatures:
    """Run the tapped backbone over all images; features are kept on the CPU in float32.

    Under torchrun (``shard``) each rank extracts its own contiguous whole batches and the
    features are gathered back in order on every rank (docs/scaling.md).
    """
    backbone.eval()
    n = len(images)
    order = length_order(images)  # texts grouped by length: each batch pads only to its own longest
    if order is not None:
        images = images[order]
    start, stop = shard_bounds(n, batch_size) if shard else (0, n)
    chunks: list[list[Tensor]] = []
    n_batches = (stop - start + batch_size - 1) // batch_size
    batched = image_batches(images, batch_size, start, stop)
    for x in track(batched, description, total=n_batches, unit="batch", of=f"of {batch_size} inputs"):
        feats = backbone_forward(backbone, to_float_images(to_device(x, device)))
        chunks.append([f.cpu() for f in feats])
    if chunks:
        feats = [torch.cat(layer) for layer in zip(*chunks)]
    elif n:  # an empty shard still needs the right widths to take part in the gather
        dims = backbone.dims(to_float_images(to_device(images[:1], device)), packed=True)
        feats = [torch.zeros(0, d) for d in dims]
    else:
        feats = []
    if shard and active():
        feats = gather_rows(feats, n)
    if order is not None:
        feats = [f[torch.argsort(order)] for f in feats]  # back in the data's order
    check_finite(backbone.layer_names, feats)
    return LayerFeatures(feats, labels.clone())


def length_order(inputs) -> Tensor | None:
    """The rows of stored token batches (N×2×L: ids, mask) from the shortest text to the longest (stable); None for
    images."""
    if not isinstance(inputs, Tensor) or inputs.ndim != 3 or inputs.shape[1] != 2 or inputs.is_floating_point():
        return None
    return torch.argsort(inputs[:, 1].sum(1), stable=True)


def image_batch(batch, where: str = "the loader") -> tuple[Tensor, Tensor]:
    """``(images, labels)`` of one batch a user's DataLoader yields, checked (a LayaError otherwise)."""
    if isinstance(batch, dict) or not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise LayaError(f"{where} must yield (images, labels) batches; got {type(batch).__name__}")
    images, labels = batch[0], batch[1]
    if not isinstance(images, Tensor) or images.ndim != 4:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise LayaError(f"{where} must yield images as a B×C×H×W tensor; got {shape}")
    if not images.is_floating_point() and images.dtype != torch.uint8:
        raise LayaError(f"{where} must yield float (or uint8) images; got {images.dtype}")
    labels = torch.as_tensor(labels)
    if labels.ndim != 1 or labels.is_floating_point() or len(labels) != len(images):
        raise LayaError(
            f"{where} must yield one integer class label per image; got labels of shape "
            f"{tuple(labels.shape)} ({labels.dtype}) for {len(images)} images"
        )
    return images, labels.long()


def token_batch(batch, where: str, text) -> tuple[Tensor, Tensor]:
    """``(tokens, labels)`` of one batch a user's DataLoader yields for a text model (``text``: its
    ``TextInput``): B×2×L token batches (ids, attention mask) as laya's own, a tokenizer's dict
    (``input_ids``, ``attention_mask``; ``labels``/``label`` inside it or beside it), or raw strings,
    tokenised with the model's tokenizer. A LayaError otherwise."""
    from ..backbones.tokenizers import encode

    labels = None
    if isinstance(batch, dict):
        inputs = batch
        labels = batch.get("labels", batch.get("label"))
    elif isinstance(batch, (tuple, list)) and len(batch) >= 2:
        inputs, labels = batch[0], batch[1]
    else:
        raise LayaError(f"{where} must yield (texts, labels) batches; got {type(batch).__name__}")
    if isinstance(inputs, dict):
        if "input_ids" not in inputs:
            raise LayaError(f"{where} yields dicts without input_ids (keys: {', '.join(inputs)})")
        ids = torch.as_tensor(inputs["input_ids"])
        mask = torch.as_tensor(inputs.get("attention_mask", torch.ones_like(ids)))
        tokens = torch.stack([ids, mask], dim=1)
    elif isinstance(inputs, (list, tuple)) and all(isinstance(t, str) for t in inputs):
        if not all(t.strip() for t in inputs):
            raise LayaError(f"{where} yields an empty string: every sample needs a text")
        tokens = encode(text, list(inputs))
    elif isinstance(inputs, Tensor) and inputs.ndim == 3 and inputs.shape[1] == 2 and not inputs.is_floating_point():
        tokens = inputs
    else:
        what = tuple(inputs.shape) if isinstance(inputs, Tensor) else type(inputs).__name__
        raise LayaError(
            f"{where} must yield texts for this text model (strings, a tokenizer's input_ids/attention_mask, "
            f"or B×2×L token tensors); got {what}"
        )
    if tokens.shape[-1] > text.max_length:
        raise LayaError(f"{where} yields {tokens.shape[-1]} tokens per text; the model takes {text.max_length}")
    if labels is None:
        raise LayaError(f"{where} yields no labels (a 'labels' key, or (texts, labels) pairs)")
    labels = torch.as_tensor(labels)
    if labels.ndim != 1 or labels.is_floating_point() or len(labels) != len(tokens):
        raise LayaError(
            f"{where} must yield one integer class label per text; got labels of shape {tuple(labels.shape)}"
        )
    return tokens, labels.long()


def model_batch(batch, where: str, cfg) -> tuple[Tensor, Tensor]:
    """A loader's batch as the model takes it: images, or a text model's B×2×L token batches (``cfg``: the
    backbone's input, a ``TextInput`` for text models)."""
    from ..backbones.spec import TextInput

    if isinstance(cfg, TextInput):
        return token_batch(batch, where, cfg)
    return image_batch(batch, where)


@torch.no_grad()
def extract_batches(
    backbone,
    batches: Iterable[tuple[Tensor, Tensor]],
    device: str = "cpu",
    description: str = "features",
    total: int | None = None,
    keep_images: bool = False,
) -> tuple[LayerFeatures, Tensor | None]:
    """Features of (images, labels) batches as they come (a user's DataLoader), on the CPU in float32;
    with ``keep_images`` the images too. One process: the batches are not sharded under torchrun."""
    backbone.eval()
    chunks: list[list[Tensor]] = []
    labels: list[Tensor] = []
    images: list[Tensor] = []
    for x, y in track(batches, description, total=total, unit="batch"):
        feats = backbone_forward(backbone, to_float_images(to_device(x, device)))
        chunks.append([f.cpu() for f in feats])
        labels.append(y.cpu().long())
        if keep_images:
            images.append(x.cpu())
    if not chunks:
        raise LayaError(f"{description}: the loader yielded no batches")
    feats = [torch.cat(layer) for layer in zip(*chunks)]
    check_finite(backbone.layer_names, feats)
    return LayerFeatures(feats, torch.cat(labels)), (torch.cat(images) if keep_images else None)


@torch.no_grad()
def tap_outputs(backbone, x: Tensor) -> list[Tensor]:
    """Each tap's raw output: what ``tap_means`` averages by default."""
    return backbone.activations(x)


def tap_updates(backbone, x: Tensor) -> list[Tensor]:
    """Each tapped block's update, output − input (what a residual block adds to its stream): the mean that
    ``--ablation mean-update`` keeps of a removed block."""
    outputs, inputs = backbone.activations_and_inputs(x)
    return [h - given for h, given in zip(outputs, inputs)]


def tap_means(
    backbone,
    images: Tensor,
    batch_size: int = 256,
    device: str = "cpu",
    description: str = "tap means",
    of=tap_outputs,
) -> list[Tensor]:
    """The mean of each tap's raw (unpooled) activation over ``images`` (or of what ``of(backbone, x)`` gives per
    tap: ``tap_updates``), in float32 on the CPU: the reference a network-scope audit patches a layer with
    (docs/metrics.md, "Two scopes"). Streamed: one batch of activations at a time, sums in float64. Under torchrun
    each rank sums its own whole batches and the per-rank sums are gathered and added in rank order."""
    backbone.eval()
    n = len(images)
    if not n:
        raise LayaError("tap means need at least one image")
    start, stop = shard_bounds(n, batch_size)
    sums = None
    total = (stop - start + batch_size - 1) // batch_size
    batched = image_batches(images, batch_size, start, stop)
    for x in track(batched, description, total=total, unit="batch", of=f"of {batch_size} inputs"):
        with backbone.full_length(), torch.no_grad():  # a text model's means are per position, up to max_length
            hs = of(backbone, to_float_images(to_device(x, device)))
        part = [h.double().sum(0).cpu() for h in hs]
        sums = part if sums is None else [s + p for s, p in zip(sums, part)]
    if sums is None:  # an empty shard still takes part in the gather
        with backbone.full_length(), torch.no_grad():
            hs = of(backbone, to_float_images(to_device(images[:1], device)))
        sums = [torch.zeros(h.shape[1:], dtype=torch.float64) for h in hs]
    if active():
        sums = [gather_rows(s.unsqueeze(0)).sum(0) for s in sums]
    means = [(s / n).float() for s in sums]
    check_finite(backbone.layer_names, means)
    return means


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
    def batches(
        self, batch_size: int, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[list[Tensor], Tensor]]:
        """(features on the device, labels) for rows [start, stop) in slices of ``batch_size``."""
        self.backbone.eval()
        stop = len(self) if stop is None else stop
        bounds = [
            [
                (i, min(i + self.backbone_batch, min(s + batch_size, stop)))
                for i in range(s, min(s + batch_size, stop), self.backbone_batch)
            ]
            for s in range(start, stop, batch_size)
        ]
        chunks = image_ranges(self.images, [r for rs in bounds for r in rs])  # decoded ahead for file images
        for s, ranges in zip(range(start, stop, batch_size), bounds):
            e = min(s + batch_size, stop)
            parts = [
                backbone_forward(self.backbone, to_float_images(to_device(next(chunks), self.device))) for _ in ranges
            ]
            feats = parts[0] if len(parts) == 1 else [torch.cat(layer) for layer in zip(*parts)]
            check_finite(self.backbone.layer_names, feats)
            yield feats, self.labels[s:e]

    def materialize(self) -> LayerFeatures:
        if self._full is None:
            self._full = extract(self.backbone, self.images, self.labels, device=self.device, shard=False)
        return self._full

    @property
    def feats(self) -> list[Tensor]:
        return self.materialize().feats

    def subset(self, index: Tensor) -> StreamedFeatures:
        return StreamedFeatures(
            self.backbone, take(self.images, index), self.labels[index], self.device, self.backbone_batch
        )

    def mean(self) -> list[Tensor]:
        return self.materialize().mean()


def feature_batches(
    feats, batch_size: int, start: int = 0, stop: int | None = None
) -> Iterator[tuple[list[Tensor], Tensor]]:
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
