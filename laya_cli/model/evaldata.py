"""The data a trained model is audited or exported on: features r_1..r_L of a test split.

Shared by ``laya audit`` and ``laya export``: the checkpoint's own dataset and test split
by default, or ``--dataset/--data-dir``; ``--samples N`` takes a seeded subset.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..data.datasets import USER_DATASET, DataDirMissing, dataset_name, holds_images, load_dataset
from ..data.images import take
from ..data.pinning import check_same_data, split_fingerprint
from ..data.settings import DataSettings, check_encoding
from ..data.text import tokenize_splits
from ..features.cache import FeatureCache, cached_extract, feature_key
from ..features.extraction import LayerFeatures, StreamedFeatures, extract_batches, feature_batches
from ..features.loaders import loader_batches, loader_length, text_input_of
from ..runtime.declare import check_at_least
from ..runtime.errors import LayaError
from ..runtime.progress import log
from .laya_model import LayaModel


@dataclass
class EvalData:
    features: LayerFeatures  # or StreamedFeatures (load_eval_data(..., stream=True) without a cache)
    images: Tensor  # the raw images of the same samples (uint8 or float), for thumbnails; tokens for text
    index: Tensor  # positions of these samples within the test split
    dataset: str
    texts: list[str] | None = None  # a text model's samples as the strings they were tokenised from


def select_samples(n_total: int, samples: int | None, seed: int) -> Tensor:
    """All indices, or a seeded subset of ``samples`` of them in ascending order."""
    check_at_least("--samples", samples)
    if samples is None or samples >= n_total:
        return torch.arange(n_total)
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_total, generator=g)[:samples].sort().values


def _shape(shape) -> str:
    return "×".join(str(int(s)) for s in shape)


def check_input_fits(model: LayaModel, image_shape, name: str) -> None:
    """Refuse, before any backbone pass, images the checkpoint's backbone cannot take.

    A backbone whose input config resizes (timm, torchvision, vit_base) takes any image, and the
    input adapter maps 1 <-> 3 channels. A backbone with ``fixed_input_size`` (the flattening
    built-in mlp) without a resize takes only the image size it was trained at.
    """
    if model.backbone.adapter.size is not None or not getattr(model.backbone.model, "fixed_input_size", False):
        return
    want = (model.spec.in_channels, *model.spec.image_size)
    have = tuple(int(s) for s in image_shape)
    if tuple(have[-2:]) != tuple(want[-2:]):
        trained_on = model.checkpoint.get("dataset", {}).get("name", "?")
        raise LayaError(
            f"the checkpoint expects {_shape(want)} images (its {model.spec.name} backbone was trained on "
            f"{trained_on} and takes only that size) but {name} has {_shape(have)} images; use data of "
            f"that size, or train a model on {name}"
        )


def _load(req: DataSettings, recorded: bool):
    """``load_dataset``; a ``--data-dir`` recorded in the checkpoint (not given now) that does not hold
    the data falls back to where laya looks by default (another machine, moved data)."""
    try:
        return load_dataset(req)
    except DataDirMissing as e:
        if not recorded:
            raise  # a --data-dir given now must hold the data
        log(f"{e} (recorded in the checkpoint); looking in the default places (docs/datasets.md)", "yellow")
        return load_dataset(replace(req, data_dir=None))


def model_dataset(
    model: LayaModel, dataset: str | None = None, data_dir: str | None = None, encoding: str | None = None
):
    """``(request, splits)``: the checkpoint's own data set (its splits, seed, image size and text encoding), or
    ``dataset``/``data_dir``/``encoding``. A folder recorded at training time that no longer holds the data falls
    back to the default places; one given now must hold it (``DataDirMissing``). The recorded encoding applies to
    the recorded data set only: another file is UTF-8 unless ``encoding`` says otherwise (a codec such as latin-1
    decodes any bytes, so applying it to a UTF-8 file would garble it silently). Shared by ``load_eval_data``,
    ``load_fit_features`` (``laya depth --refit``) and the network scope's tap means over the training split
    (network.py)."""
    ds = dict(model.checkpoint.get("dataset", {}))
    if dataset is None and ds.get("name") == USER_DATASET:
        raise LayaError(
            f"this model was trained from your own DataLoader ({ds.get('source') or 'laya_cli.fit'}), "
            f"which laya cannot load by name: pass --dataset (a registered name or PREFIX:PATH, "
            f"datasets.md in laya's docs), or in Python pass a loader: laya_cli.audit(model, loader), "
            f"export(model, loader), depth(model, loader)"
        )
    # the recorded data set where none is given, its local path as resolved at training (data/pinning.py)
    name = dataset_name(dataset or ds.get("resolved") or ds.get("name", "digits"))
    same = name in (ds.get("name"), ds.get("resolved"))
    recorded = (ds.get("data_dir_resolved") or ds.get("data_dir")) if same and data_dir is None else None
    req = DataSettings(
        name=name,
        data_dir=data_dir if data_dir is not None else recorded,
        image_size=ds.get("image_size") if same else None,
        label=ds.get("label", "genre"),
        seed=ds.get("seed", 1337),
        **{k: ds.get(k, v) for k, v in DataSettings.LATER.items() if k != "encoding"},
        encoding=check_encoding(encoding) if encoding is not None else ds.get("encoding") if same else None,
    )
    if req.image_size is None and holds_images(req):
        size = model.backbone.adapter.size or model.spec.image_size  # the backbone's input size, else as trained
        req = replace(req, image_size=max(size) if size else 32)  # decoded at the longer side, resized by the adapter
    data = tokenize_splits(_load(req, recorded=bool(recorded)), model.backbone)
    if dataset is None and data_dir is None:  # the recorded data: the same, or one line (data/pinning.py)
        check_same_data(ds.get("fingerprint"), split_fingerprint(data.test), name)
    if data.skipped:
        log(f"skipped {data.skipped} undecodable image(s)", "yellow")
    return req, data


def load_eval_data(
    model: LayaModel,
    dataset: str | None = None,
    data_dir: str | None = None,
    samples: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    use_cache: bool = True,
    stream: bool = False,
    encoding: str | None = None,
) -> EvalData:
    """The test split's features (and images; a text model's strings too) for audit/export (``encoding``: a csv:
    or jsonl: data set's text encoding, ``model_dataset``).

    Frozen backbones with the cache: features extracted once (sharded under torchrun) and cached.
    Otherwise, with ``stream``, ``features`` is a ``StreamedFeatures`` that runs the backbone batch
    by batch as the audit/export consumes it, so features are never all in memory; without
    ``stream`` they are extracted up front (the library default).
    """
    req, data = model_dataset(model, dataset, data_dir, encoding)
    name = req.name
    if len(data.classes) != len(model.classes):
        raise LayaError(
            f"dataset {name} has {len(data.classes)} classes but the checkpoint was trained on {len(model.classes)}"
        )
    check_input_fits(model, data.image_shape, name)
    test = data.test
    index = select_samples(len(test), samples, seed)
    images, labels = take(test.images, index), test.labels[index]  # file images stay lazy
    texts = [test.texts[int(i)] for i in index] if hasattr(test, "texts") else None
    model.backbone.to(device)
    cache = FeatureCache() if (use_cache and not model.spec.finetune) else None
    if stream and cache is None:
        return EvalData(StreamedFeatures(model.backbone, images, labels, device), images, index, name, texts)
    dtype = model.checkpoint.get("feature_dtype", "float32")  # the features the head was trained on
    whole = feature_key(model.backbone, data.identity, "test", req.seed, len(test), device, dtype)
    subset = len(index) < len(test)
    key = feature_key(model.backbone, data.identity, "test", req.seed, index, device, dtype) if subset else whole
    feats = cached_extract(
        model.backbone,
        images,
        labels,
        key,
        cache,
        device=device,
        description="test features",
        fallback=(whole, index) if subset else None,
        dtype=dtype,
    )
    return EvalData(feats, images, index, name, texts)


def check_fit_data(model: LayaModel) -> None:
    """Refuse, before any work, to load the training data of a model trained from the user's own DataLoader."""
    ds = model.checkpoint.get("dataset", {})
    if ds.get("name") == USER_DATASET:
        raise LayaError(
            f"--refit retrains heads on the checkpoint's training data, but this model was trained "
            f"from your own DataLoader ({ds.get('source') or 'laya_cli.fit'}), which laya cannot load "
            f"by name; run laya depth without --refit"
        )


def load_fit_features(
    model: LayaModel, device: str = "cpu", use_cache: bool = True, splits: tuple[str, ...] = ("train", "val")
) -> dict[str, LayerFeatures]:
    """Features of the checkpoint's own training splits, as its backbone (frozen now) computes them:
    what a head retrained on the checkpoint's data reads (``laya depth --refit``). Cached like the
    training run's own features (same keys: a frozen backbone's are reused)."""
    check_fit_data(model)
    req, data = model_dataset(model)
    model.backbone.to(device)
    cache = FeatureCache() if use_cache else None
    dtype = model.checkpoint.get("feature_dtype", "float32")
    out = {}
    for split in splits:
        part = getattr(data, split)
        key = feature_key(model.backbone, data.identity, split, req.seed, len(part), device, dtype)
        feats = cached_extract(
            model.backbone,
            part.images,
            part.labels,
            key,
            cache,
            device=device,
            description=f"{split} features",
            dtype=dtype,
        )
        out[split] = in_memory(feats)
    return out


def in_memory(feats) -> LayerFeatures:
    """Features of any kind (in memory, streamed, a sharded store) as one ``LayerFeatures``."""
    if isinstance(feats, LayerFeatures):
        return feats
    parts = list(feature_batches(feats, 4096))
    if not parts:
        raise LayaError("no samples")
    return LayerFeatures(
        [torch.cat([p[0][i].cpu().float() for p in parts]) for i in range(len(parts[0][0]))],
        torch.cat([p[1] for p in parts]),
    )


def expected_images(model: LayaModel) -> tuple[int, ...] | None:
    """The C×H×W (C, and H×W where the backbone does not resize) of the images an image model takes; None for a
    text model."""
    cfg = model.backbone.input_cfg
    if text_input_of(model.backbone) is not None:
        return None
    size = cfg.size or getattr(model.spec, "image_size", None)
    return (cfg.channels, *size) if size else (cfg.channels,)


def _shape_text(shape) -> str:
    return "×".join(map(str, shape))


def checked_images(model: LayaModel, batches, seen: dict):
    """A user's image batches, each checked to be B×C×H×W before it reaches the backbone; the first one's shape is
    kept in ``seen`` (what ``loader_eval_data`` names when the network cannot take it)."""
    expected = expected_images(model)
    for x, y in batches:
        if expected is not None and x.ndim != 4:
            raise LayaError(f"the loader yields images of shape {_shape_text(x.shape)}, but {_takes(expected)}")
        seen.setdefault("shape", tuple(x.shape))
        yield x, y


def _takes(expected: tuple[int, ...]) -> str:
    want = _shape_text(expected)
    return f"this model takes B×{want} batches ({want} images of [0, 1] pixels, as it was trained on)"


def loader_eval_data(model: LayaModel, loader, device: str, keep_images: bool = False) -> EvalData:
    """The samples the Python API audits, exports or analyses: a user's loader's features, extracted once in its
    order (or an ``EvalData`` the command line prepared, as it is)."""
    if isinstance(loader, EvalData):
        return loader
    model.backbone.to(device)
    seen: dict = {}
    batches = checked_images(model, loader_batches(loader, "the loader", text=text_input_of(model.backbone)), seen)
    try:
        feats, images = extract_batches(model.backbone, batches, device, "features", loader_length(loader), keep_images)
    except RuntimeError:  # torch's shape errors ("mat1 and mat2 shapes cannot be multiplied"), deep in the network
        expected, got = expected_images(model), seen.get("shape")
        if expected is None or got is None or len(expected) < 3 or tuple(got[2:]) == expected[1:]:
            raise  # the size the model was trained on (another channel count is converted): not the shape's fault
        raise LayaError(f"the loader yields images of shape {_shape_text(got)}, but {_takes(expected)}") from None
    top = int(feats.labels.max()) if len(feats) else -1
    if top >= len(model.classes) or int(feats.labels.min()) < 0:
        raise LayaError(
            f"the loader yields class {top} but the model knows {len(model.classes)} classes (0.."
            f"{len(model.classes) - 1})"
        )
    return EvalData(feats, images if images is not None else None, torch.arange(len(feats)), USER_DATASET)  # type: ignore[arg-type]
