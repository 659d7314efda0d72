"""``attach``: any ``nn.Module`` with its layers tapped for a LAYA head (``Tapped``), named so a checkpoint can
rebuild it (``backbone_name``). The Python API's ``laya_cli.attach``; the taps are the ones ``laya train`` chooses."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .. import backbones as bb
from ..backbones.spec import POOL_CHOICES, TAP_CHOICES
from ..runtime.errors import LayaError, match_choice
from .extraction import backbone_forward, model_batch, to_float_images

WEIGHTS_SOURCE = "your nn.Module (laya_cli.attach)"  # the checkpoint's backbone ``source``


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
    """The checkpoint name of ``model``: laya's built-in ``mlp``/``cnn``, the timm/torchvision name ``laya audit``
    rebuilds it by, or ``user:<module>.<class>`` for a model only its own code can build."""
    if isinstance(model, (bb.PaperMLP, bb.SmallCNN)):  # rebuilt from the input shape the checkpoint records
        return "mlp" if isinstance(model, bb.PaperMLP) else "cnn"
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
    return f"{bb.USER_BACKBONE}{module}.{cls.__qualname__}"


def attach(
    model: nn.Module,
    layers: str | Sequence[str] | None = None,
    pool: str = "auto",
    *,
    taps: str = "blocks",
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
        taps: without ``layers``, what a CNN taps (``--taps``): ``"blocks"``, its residual blocks whose skip
            carries their input (the layers it can lose), or ``"stages"``, the last block at each resolution.
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
        max_length: a text model's tokens per text at most (longer texts truncated; default min(128, its positions)).

    Returns:
        A ``Tapped``: ``tapped.layers`` are the chosen taps, ``tapped(images)`` their features.

    Raises:
        LayaError: ``model`` is not an ``nn.Module``, a pattern matches no module, there is no
            default for this model, or ``pool``/``mean``/``std`` are invalid.
    """
    if not isinstance(model, nn.Module):
        raise LayaError(f"attach() needs a torch nn.Module, got {type(model).__name__}")
    match_choice("--pool", pool, POOL_CHOICES)
    taps = match_choice("--taps", taps, TAP_CHOICES)
    from ..backbones import hf, tokenizers

    if hf.is_text(model):
        cfg = tokenizers.given_text_input(model, tokenizer, max_length)
    elif tokenizer is not None or max_length is not None:
        raise LayaError("tokenizer and max_length apply to text models; this model takes images")
    else:
        cfg = _input_config(mean, std)
    patterns = [p.strip() for p in layers.split(",") if p.strip()] if isinstance(layers, str) else list(layers or [])
    spec = bb.BackboneSpec(backbone_name(model), patterns, pool, max_length=getattr(cfg, "max_length", None), taps=taps)
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
