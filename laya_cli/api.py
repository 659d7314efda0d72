"""The Python API (``laya_cli.attach/fit/audit/export/load``): your model, your DataLoaders, DataFrames back.

Everything here calls the functions the command line calls — tap choice (``backbones``), the
training loop (``train.fit``), the audit and depth jobs (``auditing.job``, ``depthing.job``), the export
(``exporting.export_data``), the checkpoint (``LayaModel.save``/``model.load_model``) — so the two
cannot drift. Documented in docs/api.md, which quotes these docstrings.

Conventions: bad input raises ``LayaError`` with the command line's one-line messages; nothing
prints except rich progress bars (and cache status lines) while ``progress=True``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from . import backbones as bb
from .auditing.job import audit_job
from .auditing.names import parse_methods, parse_metric_groups
from .auditing.results import AuditResult
from .data.datasets import USER_DATASET, stratified_split
from .depthing.job import depth_job
from .depthing.run import DepthResult
from .exporting.run import Export, check_format, check_out_dir, export_data
from .features.cache import FeatureCache, feature_key
from .features.extraction import (
    LayerFeatures,
    backbone_forward,
    extract,
    extract_batches,
    image_batch,
    to_float_images,
    token_batch,
)
from .model.evaldata import EvalData
from .model.heads import HEADS, build_head
from .model.laya_model import USER_BACKBONE, EndToEnd, LayaModel, load_model
from .runtime import progress as _progress
from .runtime.config import (
    EXIT_THRESHOLDS,
    POOL_CHOICES,
    AuditSettings,
    DepthSettings,
    HeadConfig,
    ScopeSettings,
    TrainConfig,
    check_at_least,
    check_choice,
    settings_from,
)
from .runtime.device import resolve_device
from .runtime.errors import LayaError, match_choice
from .training.loop import EpochRecord, train_metrics
from .training.loop import fit as train_loop

__all__ = ["Tapped", "attach", "fit", "audit", "export", "load"]

HEAD, TRAIN, AUDIT, SCOPE = HeadConfig(), TrainConfig(), AuditSettings(), ScopeSettings()
DEPTH = DepthSettings()
CACHES = ("memory", "disk")
WEIGHTS_SOURCE = "your nn.Module (laya_cli.attach)"  # the checkpoint's backbone ``source``

# A DataLoader, or any iterable of (images, labels) batches: images B×C×H×W float (or uint8)
# tensors, labels B integer classes.
Loader = Iterable[Any]


# --------------------------------------------------------------------------- attach


class Tapped:
    """A model with its layers tapped: ``tapped(images) -> [r_1, ..., r_L]``. Made by ``attach``.

    Attributes:
        model: your ``nn.Module`` (not copied: ``fit(..., frozen=False)`` trains it in place).
        backbone: the ``TappedBackbone`` wrapping it (what a ``LayaModel`` carries).
        name: how a checkpoint names the backbone: ``timm:NAME`` or ``torchvision:NAME`` when the
            command line can rebuild it by name, else ``user:<module>.<class>``.
    """

    def __init__(
        self, model: nn.Module, spec: bb.BackboneSpec, cfg: bb.InputConfig, backbone: bb.TappedBackbone | None
    ):
        self.model = model
        self.name = spec.name
        self._spec, self._cfg = spec, cfg  # what the first batch resolves the taps with, when attach could not
        self._backbone = backbone
        self.image_shape: tuple[int, int, int] | None = None  # (C, H, W) of the first batch seen

    @property
    def backbone(self) -> bb.TappedBackbone:
        if self._backbone is None:
            raise LayaError(
                "this model's default taps are chosen by running it on your first batch: call "
                "fit() or tapped(images) first, or choose them with attach(model, layers=...)"
            )
        return self._backbone

    @property
    def layers(self) -> list[str]:
        """The tapped module names, in model order."""
        return list(self.backbone.layer_names)

    @property
    def pool(self) -> str:
        """How each tap is pooled to a vector: ``cls`` or ``mean`` for token outputs."""
        return self.backbone.pool

    def _bind(self, images: Tensor) -> None:
        """The first batch fixes the input: channels (unless ``mean``/``std`` did) and image size, and
        the default taps of a model that had to be run to choose them (``backbones.tap_model``)."""
        if self.image_shape is None:
            self.image_shape = tuple(images.shape[1:])  # type: ignore[assignment]
        if not self._cfg.channels:
            self._cfg.channels = int(images.shape[1])
        if self._backbone is None:
            try:
                self._backbone = bb.tap_model(self.model, self._cfg, self._spec, example_shape=self.image_shape)
            except LayaError:
                raise
            except Exception as e:  # the model cannot run on the loader's images
                detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                shape = "×".join(str(v) for v in images.shape[1:])
                raise LayaError(f"the model fails on a {shape} input: {type(e).__name__}: {detail}") from None
            self._backbone.weights_source = WEIGHTS_SOURCE
        backbone = self._backbone
        if not backbone.adapter.channels:
            backbone.adapter.channels = int(images.shape[1])
        if backbone.example_shape is None:
            backbone.example_shape = self.image_shape

    @torch.no_grad()
    def __call__(self, images: Tensor) -> list[Tensor]:
        """The pooled representations [r_1, ..., r_L] of a batch (B×C×H×W)."""
        images, _ = model_batch((images, torch.zeros(len(images), dtype=torch.long)), "images", self._cfg)
        self._bind(images)
        self.backbone.eval()
        return backbone_forward(self.backbone, to_float_images(images))

    def __repr__(self) -> str:
        if self._backbone is None:
            return f"Tapped({self.name}, default taps chosen on the first batch)"
        return f"Tapped({self.name}, {len(self.layers)} layers: {', '.join(self.layers)}; pool {self.pool})"


def _classifier(name: str) -> bool:
    return (name + ".").startswith(bb.CLASSIFIER_KEYS)


def _layout(model: nn.Module) -> tuple[set[str], dict[str, tuple]]:
    """Module names and weight shapes, classifier aside."""
    return (
        {n for n, _ in model.named_modules() if not _classifier(n)},
        {k: tuple(v.shape) for k, v in model.state_dict().items() if not _classifier(k)},
    )


def _rebuilds_as(model: nn.Module, build) -> bool:
    """Whether ``build()`` (what ``laya audit`` runs for a name) makes the same modules and weight
    shapes as ``model``, classifiers aside (they are replaced by the head)."""
    try:
        with torch.device("meta"):
            other = build()
    except Exception:  # a builder that cannot run on the meta device: build it for real
        try:
            other = build()
        except Exception:
            return False
    return _layout(model) == _layout(other)


def backbone_name(model: nn.Module) -> str:
    """The checkpoint name of ``model``: the timm/torchvision name ``laya audit`` rebuilds it by, or
    ``user:<module>.<class>`` for a model only its own code can build."""
    cls = type(model)
    module = cls.__module__
    if module.startswith("timm."):
        import timm

        arch = (getattr(model, "pretrained_cfg", None) or {}).get("architecture")
        if (
            arch
            and arch in timm.list_models()
            and _rebuilds_as(model, lambda: timm.create_model(arch, pretrained=False, num_classes=0))
        ):
            return f"timm:{arch}"
    elif module.startswith("torchvision.models"):
        import torchvision

        tv = torchvision.models

        def returns(name: str) -> str | None:
            ret = getattr(tv.get_model_builder(name), "__annotations__", {}).get("return")
            return getattr(ret, "__name__", ret)

        def distance(name: str) -> float:  # try the builders closest in size first (no building needed)
            try:
                return abs(next(iter(tv.get_model_weights(name))).meta["num_params"] - size)
            except Exception:
                return float("inf")

        size = sum(p.numel() for p in model.parameters())
        candidates = [n for n in tv.list_models(module=tv) if returns(n) == cls.__name__]
        for name in sorted(candidates, key=distance):
            if _rebuilds_as(model, lambda name=name: tv.get_model(name, weights=None)):
                return f"torchvision:{name}"
    return f"{USER_BACKBONE}{module}.{cls.__qualname__}"


def attach(
    model: nn.Module,
    layers: str | Sequence[str] | None = None,
    pool: str = "auto",
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    tokenizer=None,
    max_length: int | None = None,
) -> Tapped:
    """Tap the layers of any ``nn.Module`` (timm, torchvision, Hugging Face transformers or your own) for a
    LAYA head.

    Args:
        model: the backbone. It is used as is (not copied) and fed exactly what your loader
            yields; its forward is only run, never changed (its own classifier output is ignored).
        layers: glob patterns over module names (``"blocks.*"``, ``["layer1", "layer4"]``; ``*`` is
            one name part, ``**`` any), or None for the taps ``laya train`` chooses for this model
            (docs/backbones.md): a timm model's ``feature_info`` stages, a torchvision family's own
            taps, else the longest run of blocks, found by running the model once — on a 3×224×224
            probe, or, for a model that cannot take one, on the first batch ``fit`` or ``tapped``
            is given (until then ``tapped.layers`` raises).
        pool: how a B×N×D token output becomes a vector: ``"cls"``, ``"mean"``, or ``"auto"`` (CLS
            when the model has a class token, else the mean). Each tap's layout (B×C×H×W,
            B×H×W×C, tokens) is read as ``laya train`` reads it; feature maps are averaged.
        mean: a per-channel mean subtracted from your loader's images before the model (with
            ``std``); None: none, the model gets your tensors exactly. laya's datasets serve
            [0, 1] images: normalise here rather than in your transforms, and ``laya audit
            --dataset …`` feeds the model the way your loader does.
        std: the per-channel standard deviation divided by (with ``mean``).
        tokenizer: a text model's tokenizer (a transformers fast tokenizer or a ``tokenizers.Tokenizer``),
            needed when your loader yields raw strings; it is stored in the checkpoint. Loaders may also
            yield a tokenizer's dicts (``input_ids``, ``attention_mask``) or B×2×L token tensors.
        max_length: a text model's tokens per text (padded and truncated; default min(128, its positions)).

    Returns:
        A ``Tapped``: ``tapped.layers`` are the chosen taps, ``tapped(images)`` their features.

    Raises:
        LayaError: ``model`` is not an ``nn.Module``, a pattern matches no module, there is no
            default for this model, or ``pool``/``mean``/``std`` are invalid.
    """
    if not isinstance(model, nn.Module):
        raise LayaError(f"attach() needs a torch nn.Module, got {type(model).__name__}")
    check_choice("--pool", pool, POOL_CHOICES)
    from .backbones import hf, tokens

    if hf.is_text(model):
        cfg = tokens.given_text_input(model, tokenizer, max_length)
    elif tokenizer is not None or max_length is not None:
        raise LayaError("tokenizer and max_length apply to text models; this model takes images")
    else:
        cfg = _input_config(mean, std)
    patterns = [p.strip() for p in layers.split(",") if p.strip()] if isinstance(layers, str) else list(layers or [])
    spec = bb.BackboneSpec(backbone_name(model), patterns, pool, max_length=getattr(cfg, "max_length", None))
    # The taps, pooling and tap formats `laya train` would choose (backbones.tap_model, which
    # build_backbone calls too). A model that declares no taps is run once to find its blocks: on a
    # 3×224×224 probe here, or, when it cannot take that, on the first batch of your loader.
    backbone: bb.TappedBackbone | None = None
    try:
        backbone = bb.tap_model(model, cfg, spec)
        backbone.weights_source = WEIGHTS_SOURCE
    except LayaError:
        raise
    except Exception:
        backbone = None
    return Tapped(model, spec, cfg, backbone)


def _input_config(mean: Sequence[float] | None, std: Sequence[float] | None) -> bb.InputConfig:
    """How the loader's images are normalised before the model: by ``mean``/``std`` (one value per channel,
    which then fixes the channels), or not at all (the channels are the first batch's)."""
    if (mean is None) != (std is None):
        raise LayaError("give mean and std together (the normalisation of your loader's images), or neither")
    if mean is None or std is None:
        return bb.InputConfig(0, None, (0.0,), (1.0,))
    mean, std = [float(v) for v in mean], [float(v) for v in std]
    if len(mean) != len(std) or not mean:
        raise LayaError(f"mean and std need one value per channel each; got {len(mean)} and {len(std)}")
    if not all(v > 0 for v in std):
        raise LayaError(f"std must be positive, got {std}")
    return bb.InputConfig(len(mean) if len(mean) > 1 else 0, None, tuple(mean), tuple(std))


# --------------------------------------------------------------------------- reading loaders


def _batches(
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


def model_batch(batch, where: str, cfg) -> tuple[Tensor, Tensor]:
    """A loader's batch as the model takes it: images, or a text model's B×2×L token batches."""
    if isinstance(cfg, bb.TextInput):
        return token_batch(batch, where, cfg)
    return image_batch(batch, where)


def _text_of(backbone) -> bb.TextInput | None:
    return backbone.input_cfg if isinstance(backbone.input_cfg, bb.TextInput) else None


def _length(loader: Loader) -> int | None:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def _sample_digests(images: Tensor, labels: Tensor) -> list[bytes]:
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


def _read_features(tapped: Tapped, loader: Loader, device: str, what: str, cache: str) -> LayerFeatures:
    """Features of every sample the loader yields, extracted once (``cache="memory"``), or also kept in
    the on-disk feature cache (``"disk"``), keyed by the backbone and the samples' content."""
    where = f"the {what} loader"
    if cache == "memory":
        feats, _ = extract_batches(
            tapped.backbone, _batches(loader, where, tapped), device, f"{what} features", _length(loader)
        )
        return feats
    # disk: one pass hashes every (image, label); a hit skips the backbone. Entries hold their rows in
    # the order of the hashes, so a shuffling loader finds its entry too; what is returned is in the
    # order of that first pass, as "memory" would give it (the same model either way).
    digests: list[bytes] = []
    for images, labels in _progress.track(_batches(loader, where, tapped), f"hashing {what} data", _length(loader)):
        digests += _sample_digests(images, labels)
    if not digests:
        raise LayaError(f"{where} yielded no batches")
    identity = "loader:" + hashlib.sha256(b"".join(sorted(digests))).hexdigest()
    key = feature_key(tapped.backbone, identity, "loader", None, len(digests), device)
    store = FeatureCache()
    hit = store.load(key)
    if hit is not None and len(hit) == len(digests):
        _progress.log(f"reusing cached {what} features ({store.path(key)})")
        return hit.subset(_order(sorted(digests), digests))
    seen: list[bytes] = []

    def hashed() -> Iterator[tuple[Tensor, Tensor]]:
        for images, labels in _batches(loader, where, tapped):
            seen.extend(_sample_digests(images, labels))
            yield images, labels

    feats, _ = extract_batches(tapped.backbone, hashed(), device, f"{what} features", _length(loader))
    if sorted(seen) != sorted(digests):
        _progress.log(
            f"[yellow]{where} yields different samples on every pass (random transforms?): "
            f"its features are not cached on disk[/]"
        )
        return feats
    store.save(key, feats.subset(_order(seen, sorted(digests))))
    return feats.subset(_order(seen, digests))


def _read_images(loader: Loader, what: str, tapped: Tapped) -> tuple[Tensor, Tensor]:
    images, labels = [], []
    for x, y in _progress.track(
        _batches(loader, f"the {what} loader", tapped), f"reading {what} data", _length(loader)
    ):
        images.append(x.cpu())
        labels.append(y.cpu())
    if not images:
        raise LayaError(f"the {what} loader yielded no batches")
    return torch.cat(images), torch.cat(labels)


def _classes(classes: Sequence[str] | None, loader: Loader, labels: Sequence[Tensor]) -> list[str]:
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


# --------------------------------------------------------------------------- fit


def fit(
    tapped: Tapped | nn.Module,
    train_loader: Loader,
    val_loader: Loader | None = None,
    head: str = "laya",
    frozen: bool = True,
    *,
    d_star: int = HEAD.d_star,
    tau: float = HEAD.tau,
    psi: str = HEAD.psi,
    score_hidden: int = HEAD.score_hidden,
    epochs: int = TRAIN.epochs,
    batch_size: int | None = None,
    lr: float = TRAIN.lr,
    patience: int = TRAIN.patience,
    seed: int = TRAIN.seed,
    val_fraction: float = 0.1,
    classes: Sequence[str] | None = None,
    cache: str = "memory",
    device: str = "auto",
    progress: bool = True,
) -> LayaModel:
    """Train a head on a tapped model from your own DataLoaders; the loop of ``laya train``.

    Adam, early stopping on validation accuracy (best weights restored), seeded. A frozen backbone
    is run over each loader once and the head trains on those features for every epoch.

    Args:
        tapped: what ``attach`` returned (a plain ``nn.Module`` is attached with the defaults).
        train_loader: yields ``(images, labels)``: B×C×H×W float tensors, already transformed as
            the model wants them, and integer class labels 0..C-1.
        val_loader: the same for early stopping; None: a stratified ``val_fraction`` of the
            training samples, drawn with ``seed`` (as ``laya train`` does).
        head: ``"laya"``, or a baseline: ``"last"``, ``"concat"``, ``"scalarmix"``.
        frozen: True: the backbone is not trained (its features are extracted once); False: it
            is trained end to end with the head (in place), from the loaders read into memory once.
        d_star: adapter width d*.
        tau: softmax temperature of the attention (fixed).
        psi: shared transform before scoring, ``"identity"`` or ``"mlp"``.
        score_hidden: hidden width of the scoring MLP.
        epochs: at most this many epochs.
        batch_size: training batch size; None: the train loader's, else 128.
        lr: Adam learning rate.
        patience: epochs without a better validation accuracy before stopping.
        seed: seeds the loaders' shuffling, the validation split, the head's initialisation and
            the training order.
        val_fraction: the share of training samples held out when there is no ``val_loader``.
        classes: class names in label order; None: ``train_loader.dataset.classes`` if it has
            them, else ``"0"``, ``"1"``, …
        cache: frozen features are held in ``"memory"``, or also written to the on-disk feature
            cache (``"disk"``, ``$LAYA_CACHE_DIR``) and reused next time, keyed by the backbone's
            weights and the content of every sample (a loader with random transforms is not cached).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``.
        progress: rich progress bars (False: silent).

    Returns:
        The trained ``LayaModel``. ``model.save("model.pt")`` writes the checkpoint ``laya train``
        writes; ``model.checkpoint["history"]`` holds the epochs.

    Raises:
        LayaError: an invalid option, or a loader that does not yield (images, labels) batches.
    """
    tapped = tapped if isinstance(tapped, Tapped) else attach(tapped)
    head = match_choice("head", head, HEADS)  # case-insensitive, as on the command line
    check_choice("cache", cache, CACHES)
    head_cfg = HeadConfig(d_star=d_star, tau=tau, psi=psi, score_hidden=score_hidden).validate()
    batch_size = batch_size or getattr(train_loader, "batch_size", None) or TRAIN.batch_size
    dev = resolve_device(device)
    cfg = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, patience=patience, seed=seed, device=dev).validate()
    if val_loader is None and not 0 < val_fraction < 1:
        raise LayaError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    first = _first_images(train_loader, tapped)
    job = _FitJob(tapped, train_loader, val_loader, head, head_cfg, cfg, val_fraction, classes)
    with _progress.enabled(progress):
        tapped.backbone.to(dev)
        tapped.backbone.dims(to_float_images(first[:1]).to(dev))  # one line if the model cannot take these
        torch.manual_seed(seed)  # the loaders' shuffling (a DataLoader draws its order from torch's RNG)
        fitted = job.frozen(cache) if frozen else job.end_to_end()
    return job.laya_model(fitted, frozen)


def _first_images(loader: Loader, tapped: Tapped) -> Tensor:
    """The first batch's images; binding the input to them chooses the taps a model defers to its first batch."""
    first = next(_batches(loader, "the train loader", tapped), None)
    if first is None:
        raise LayaError("the train loader yielded no batches")
    return first[0]


class _Fitted(NamedTuple):
    head: nn.Module
    history: list[EpochRecord]
    reference: list[Tensor]  # the mean training features
    classes: list[str]
    dims: list[int]
    n_train: int
    n_val: int


@dataclass
class _FitJob:
    """``fit``'s checked settings, the two ways it trains (backbone frozen or not), and the model it returns."""

    tapped: Tapped
    train_loader: Loader
    val_loader: Loader | None
    head: str
    head_cfg: HeadConfig
    cfg: TrainConfig
    val_fraction: float
    classes: Sequence[str] | None

    def frozen(self, cache: str) -> _Fitted:
        """The head alone, on features the backbone computes once per loader."""
        train = _read_features(self.tapped, self.train_loader, self.cfg.device, "train", cache)
        if self.val_loader is not None:
            val = _read_features(self.tapped, self.val_loader, self.cfg.device, "val", cache)
        else:
            kept, held = stratified_split(train.labels, self.val_fraction, self.cfg.seed)
            train, val = train.subset(kept), train.subset(held)
        names = _classes(self.classes, self.train_loader, [train.labels, val.labels])
        dims = [f.shape[1] for f in train.feats]
        head = self._new_head(dims, len(names))
        history = train_loop(head, (train.feats, train.labels), (val.feats, val.labels), self.cfg)
        return _Fitted(head, history, train.mean(), names, dims, len(train), len(val))

    def end_to_end(self) -> _Fitted:
        """Backbone (in place) and head together, on the loaders' images read into memory once."""
        backbone, dev = self.tapped.backbone, self.cfg.device
        images, labels = _read_images(self.train_loader, "train", self.tapped)
        if self.val_loader is not None:
            val_images, val_labels = _read_images(self.val_loader, "val", self.tapped)
        else:
            kept, held = stratified_split(labels, self.val_fraction, self.cfg.seed)
            images, labels, val_images, val_labels = images[kept], labels[kept], images[held], labels[held]
        names = _classes(self.classes, self.train_loader, [labels, val_labels])
        dims = backbone.dims(to_float_images(images[:1]).to(dev))
        head = self._new_head(dims, len(names))
        model = EndToEnd(backbone, head)
        history = train_loop(model, ([images], labels), ([val_images], val_labels), self.cfg, data_parallel=True)
        reference = extract(backbone, images, labels, device=dev, description="reference", shard=False).mean()
        return _Fitted(head, history, reference, names, dims, len(labels), len(val_labels))

    def _new_head(self, dims: Sequence[int], num_classes: int) -> nn.Module:
        torch.manual_seed(self.cfg.seed)
        return build_head(self.head, dims, num_classes, self.head_cfg).to(self.cfg.device)

    def laya_model(self, fitted: _Fitted, frozen: bool) -> LayaModel:
        """The trained model, its checkpoint metadata as ``laya train`` writes it."""
        tapped = self.tapped
        text = isinstance(tapped._cfg, bb.TextInput)
        c, h, w = (1, 8, 8) if text else (tapped.image_shape or (0, 0, 0))
        formats = tapped.backbone.tap_formats
        spec = bb.BackboneSpec(
            tapped.name,
            tapped.layers,
            tapped.pool,
            pretrained=False,
            finetune=not frozen,
            in_channels=c,
            image_size=(h, w),
            formats=formats if "?" not in formats else [],
            max_length=tapped._cfg.max_length if text else None,
        )
        meta = {
            "layers": list(spec.layers),
            "dims": list(fitted.dims),
            "head": {"kind": self.head, "config": self.head_cfg.to_dict()},
            "classes": fitted.classes,
            "dataset": {
                "name": USER_DATASET,
                "data_dir": None,
                "image_size": None,
                "label": "genre",
                "seed": self.cfg.seed,
                "unmatched": [],
                "source": _describe(self.train_loader),
            },
            "history": [asdict(r) for r in fitted.history],
            "metrics": train_metrics(fitted.history, fitted.n_train, fitted.n_val),
            "train_config": asdict(self.cfg),
        }
        reference = [r.cpu() for r in fitted.reference]
        return LayaModel(tapped.backbone, fitted.head, spec, self.head, fitted.classes, reference, meta).eval()


def _describe(loader: Loader) -> str:
    dataset = getattr(loader, "dataset", None)
    what = type(dataset).__name__ if dataset is not None else type(loader).__name__
    n = _length(dataset) if dataset is not None else None
    return f"DataLoader over {what}" + (f" ({n} samples)" if n is not None else "")


# --------------------------------------------------------------------------- audit and export


def eval_data(model: LayaModel, loader: Loader | EvalData, device: str, keep_images: bool = False) -> EvalData:
    """The samples to audit or export: a loader's features, extracted once in its order (or the data
    ``laya audit``/``laya export`` prepared, as it is)."""
    if isinstance(loader, EvalData):
        return loader
    model.backbone.to(device)
    feats, images = extract_batches(
        model.backbone,
        _batches(loader, "the loader", text=_text_of(model.backbone)),
        device,
        "features",
        _length(loader),
        keep_images,
    )
    top = int(feats.labels.max()) if len(feats) else -1
    if top >= len(model.classes) or int(feats.labels.min()) < 0:
        raise LayaError(
            f"the loader yields class {top} but the model knows {len(model.classes)} classes (0.."
            f"{len(model.classes) - 1})"
        )
    return EvalData(feats, images if images is not None else None, torch.arange(len(feats)), USER_DATASET)  # type: ignore[arg-type]


def audit(
    model: LayaModel,
    loader: Loader | EvalData,
    compare: str | Sequence[str] = ("ig", "gradxact"),
    *,
    ablation: str = AUDIT.ablation,
    target: str = AUDIT.target,
    reduce: str = AUDIT.reduce,
    steps: int = AUDIT.steps,
    ig_tol: float = AUDIT.ig_tol,
    metrics: str | Sequence[str] = (),
    internal_batch_size: int | None = AUDIT.internal_batch_size,
    batch_size: int = AUDIT.batch_size,
    seed: int = AUDIT.seed,
    by_class: bool = AUDIT.by_class,
    scope: str = SCOPE.scope,
    device: str = "auto",
    progress: bool = True,
) -> AuditResult:
    """Audit how faithfully each method's layer attribution explains each prediction (``laya audit``).

    Every sample's layers are removed one at a time (Δ_i = the drop in p_ŷ); each method is scored
    by faithfulness (Spearman ρ between its scores and Δ) and Deletion@1 (docs/metrics.md).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``).
        loader: yields ``(images, labels)`` as the model was trained on (a model trained by
            ``laya train`` takes [0, 1] images, as laya's datasets serve them); every sample is
            audited, in the loader's order. (``laya audit`` passes its prepared test split here.)
        compare: methods to compare with ``laya`` and ``random`` (always audited): ``"ig"``,
            ``"gradxact"``, ``"saliency"``, ``"contrib"``, ``"global"``, ``"all"``; a comma string
            or a sequence.
        ablation: how a layer is removed: ``"mean"`` (r_i := its training mean), ``"zero"``,
            ``"mask"`` (α_i := 0; laya/scalarmix heads).
        target: the class explained: ``"predicted"`` or ``"label"``.
        reduce: per-layer reduction of gradient attributions: ``"sum"``, ``"abs"`` or ``"l2"``.
        steps: Integrated Gradients' most steps per sample.
        ig_tol: IG's completeness tolerance: each sample's steps double from 4 (network scope: 16)
            until |convergence delta| <= ig_tol * |p(x) - p(baseline)|, at most ``steps``; 0: ``steps``.
        metrics: the deeper metric groups to compute: ``"aopc"``, ``"sufficiency"``,
            ``"completeness"``, ``"randomisation"`` (a comma string or a sequence) or ``"all"``;
            faithfulness and Deletion@1 are always computed.
        internal_batch_size: at most this many rows per IG head pass (memory bound).
        batch_size: samples per audited batch.
        seed: seed of the ``random`` method.
        by_class: also score each class (``result.by_class``, ``result.to_pandas(by_class=True)``).
        scope: where a layer is removed: ``"head"`` (at the head's inputs: direct effects),
            ``"network"`` (patched inside the backbone, every later layer sees it: total effects;
            ablation ``"mean"`` or ``"zero"``) or ``"both"`` (and their comparison), as
            ``laya audit --scope``. The network scope is in ``result.network`` and
            ``result.summary["network"]``; ``to_pandas()`` and ``per_sample()`` cover the head scope.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``.
        progress: rich progress bars (False: silent).

    Returns:
        An ``AuditResult``: ``.summary`` (the JSON dict of ``laya audit --json``), ``.to_pandas()``
        (one row per method) and ``.per_sample()`` (one row per sample: index, label, predicted,
        target, Δ per layer, and per method ρ, Deletion@1 and its score of each layer).

    Raises:
        LayaError: an unknown method or setting, an ablation the head cannot do, taps the network
            scope cannot patch, or a bad loader.
    """
    metrics, device = tuple(parse_metric_groups(metrics)), resolve_device(device)
    settings = settings_from(AuditSettings, locals())
    methods = parse_methods(compare)
    scope = ScopeSettings(scope).validate().scope
    keep_images = scope != "head"  # the network runs on images
    with _progress.enabled(progress):
        return audit_job(
            model, partial(eval_data, model, loader, settings.device, keep_images), methods, settings, scope
        )


def export(
    model: LayaModel,
    loader: Loader | EvalData,
    out: str | Path | None = None,
    *,
    format: str = "csv",
    plots: bool = True,
    strip: int = 8,
    overwrite: bool = False,
    device: str = "auto",
    progress: bool = True,
) -> Export:
    """Per-sample layer attention, class × layer profiles and the attention-shift ranking (``laya export``).

    Args:
        model: a ``LayaModel``.
        loader: yields ``(images, labels)``; every sample is exported, in the loader's order.
        out: a folder to write the files of ``laya export`` to (tables, PNG plots, report.html),
            atomically; None: nothing is written.
        format: per-sample table file format with ``out``: ``"csv"``, ``"parquet"`` or ``"npz"``.
        plots: draw the PNG figures (with ``out``).
        strip: how many samples the image strip shows (with ``out`` and ``plots``; 0: none).
        overwrite: replace ``out`` if it holds a previous laya export (never any other folder).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``.
        progress: rich progress bars (False: silent).

    Returns:
        An ``Export`` of DataFrames: ``.table`` (one row per sample: index, label, predicted,
        p_pred, ``alpha[<layer>]``, ``contrib[<layer>]``), ``.profiles`` (class × layer, long),
        ``.global_profile``, ``.shift`` (classes ranked by attention shift); ``.files`` written.

    Raises:
        LayaError: a bad format, an ``out`` that is not empty nor a previous export, or a bad loader.
    """
    dev = resolve_device(device)
    if out is not None:
        check_format(format)
        check_at_least("--strip", strip, 0)
        check_out_dir(out, overwrite)
    with _progress.enabled(progress):
        data = eval_data(model, loader, dev, keep_images=out is not None and plots and strip > 0)
        return export_data(
            model,
            data,
            out,
            fmt=format,
            plots=plots,
            strip=strip,
            overwrite=overwrite,
            device=dev,
            info={"source": "laya_cli.export"},
        )


# --------------------------------------------------------------------------- depth


def depth(
    model: LayaModel,
    loader: Loader | EvalData,
    *,
    refit: bool = False,
    refit_epochs: int | None = None,
    thresholds: Sequence[float] = EXIT_THRESHOLDS,
    time_repeats: int = DEPTH.time_repeats,
    time_batch: int = DEPTH.time_batch,
    batch_size: int = DEPTH.batch_size,
    device: str = "auto",
    progress: bool = True,
) -> DepthResult:
    """How deep must the model be (``laya depth``): accuracy when cut after each tap, compute, early exit.

    For every depth k: the accuracy of the model cut after tap k (α masked above k and renormalised;
    heads with α), the backbone FLOPs and wall time up to tap k, early-exit threshold sweeps with
    their cheapest operating points, and the per-sample minimal sufficient depth (docs/depth.md).

    Args:
        model: a ``LayaModel`` (from ``fit`` or ``load``).
        loader: yields ``(images, labels)`` as the model was trained on; every sample is analysed.
        refit: also retrain a head of the model's kind on the taps ≤ k for each k, on the training
            data the checkpoint records (a model trained by ``laya train``; any head kind).
        refit_epochs: maximum epochs of each refitted head (None: the model's own).
        thresholds: early-exit thresholds, each in (0, 1].
        time_repeats: timed rounds per depth (the fastest is kept); 0: FLOPs only.
        time_batch: images per timed backbone pass.
        batch_size: samples per head pass.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``.
        progress: rich progress bars (False: silent).

    Returns:
        A ``DepthResult``: ``.to_pandas()`` (the truncation table, one row per depth k),
        ``.to_dict()`` (the JSON ``laya depth --json`` writes), ``.truncation``, ``.early_exit``,
        ``.oracle``, ``.compute``, ``.full``, ``.notes``.

    Raises:
        LayaError: a head without α and no ``refit``, a threshold outside (0, 1], ``refit`` for a
            model trained from your own DataLoader, or a bad loader.
    """
    settings = DepthSettings(
        batch_size=batch_size,
        refit=refit,
        refit_epochs=refit_epochs,
        thresholds=tuple(thresholds),
        time_repeats=time_repeats,
        time_batch=time_batch,
        device=resolve_device(device),
    ).validate()
    with _progress.enabled(progress):
        return depth_job(model, partial(eval_data, model, loader, settings.device, keep_images=True), settings)


# --------------------------------------------------------------------------- load


def load(path: str | Path, backbone: nn.Module | None = None) -> LayaModel:
    """Load a checkpoint written by ``laya train`` or ``LayaModel.save`` (safely: ``weights_only``).

    Args:
        path: the checkpoint file.
        backbone: for a checkpoint whose backbone is your own class (``laya info`` names it
            ``user:<module>.<class>``), an instance of it to load the stored weights into.

    Returns:
        The ``LayaModel``, in eval mode on the CPU.

    Raises:
        LayaError: the file is missing, not a laya checkpoint, from a newer laya, inconsistent, or
            needs ``backbone``.
    """
    return load_model(path, backbone)
