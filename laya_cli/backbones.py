"""Backbones: a model plus the layers we tap and how each tap is pooled to a vector.

Every backbone family answers the same small interface: a builder in ``BACKBONES`` (or a
``prefix:`` builder in ``FAMILIES``) returns a plain ``nn.Module`` plus its input config;
``TappedBackbone`` then hooks the chosen layers and returns ``[r_1, ..., r_L]``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import LayaError, unknown_choice

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# --------------------------------------------------------------------------- built-ins


class PaperMLP(nn.Module):
    """The paper's MLP: in -> 512 -> 256 -> 128, each Linear + LayerNorm + GELU."""

    def __init__(self, in_features: int, widths: Sequence[int] = (512, 256, 128)):
        super().__init__()
        dims = [in_features, *widths]
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), nn.LayerNorm(b), nn.GELU()) for a, b in zip(dims, dims[1:])
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x.flatten(1)
        for block in self.blocks:
            x = block(x)
        return x


class SmallCNN(nn.Module):
    """A CIFAR-size CNN: 4 stages of (conv-BN-ReLU) x2, max-pool between stages."""

    def __init__(self, in_channels: int = 3, widths: Sequence[int] = (32, 64, 128, 256)):
        super().__init__()
        chans = [in_channels, *widths]
        stages = []
        for i, (a, b) in enumerate(zip(chans, chans[1:])):
            layers = [] if i == 0 else [nn.MaxPool2d(2, ceil_mode=True)]
            layers += [
                nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
            ]
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


@dataclass
class InputConfig:
    """What the backbone expects: (C, H, W) and the normalisation of [0, 1] pixels."""

    channels: int
    size: tuple[int, int] | None  # None: keep the data's own size
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass
class BackboneSpec:
    """Everything needed to rebuild a backbone (stored in the checkpoint)."""

    name: str  # "mlp", "cnn", "vit_base", "timm:NAME", "torchvision:NAME"
    layers: list[str] = field(default_factory=list)  # tap globs (before resolving) or names
    pool: str = "auto"  # auto | cls | mean
    pretrained: bool = False
    finetune: bool = False
    in_channels: int = 1
    image_size: tuple[int, int] = (8, 8)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["image_size"] = list(self.image_size)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BackboneSpec":
        d = dict(d)
        d["image_size"] = tuple(d["image_size"])
        return cls(**d)


def _build_mlp(spec: BackboneSpec) -> tuple[nn.Module, InputConfig]:
    h, w = spec.image_size
    model = PaperMLP(spec.in_channels * h * w)
    return model, InputConfig(spec.in_channels, None, (0.5,), (0.5,))


def _build_cnn(spec: BackboneSpec) -> tuple[nn.Module, InputConfig]:
    return SmallCNN(spec.in_channels), InputConfig(spec.in_channels, None, (0.5,), (0.5,))


def _build_timm(name: str, spec: BackboneSpec) -> tuple[nn.Module, InputConfig]:
    import timm

    if name not in timm.list_models() and name not in timm.list_models(pretrained=True):
        raise unknown_choice("timm model", name, timm.list_models())
    try:
        model = timm.create_model(name, pretrained=spec.pretrained, num_classes=0)
    except Exception as e:  # network or hub failures when asking for pretrained weights
        raise LayaError(f"could not create timm:{name} (pretrained={spec.pretrained}): {e}") from None
    cfg = model.pretrained_cfg
    _, h, w = cfg.get("input_size", (3, 224, 224))
    return model, InputConfig(3, (h, w), tuple(cfg.get("mean", IMAGENET_MEAN)), tuple(cfg.get("std", IMAGENET_STD)))


def _build_torchvision(name: str, spec: BackboneSpec) -> tuple[nn.Module, InputConfig]:
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if name not in names:
        raise unknown_choice("torchvision model", name, names)
    try:
        model = torchvision.models.get_model(name, weights="DEFAULT" if spec.pretrained else None)
    except Exception as e:
        raise LayaError(f"could not create torchvision:{name} (pretrained={spec.pretrained}): {e}") from None
    return model, InputConfig(3, (224, 224), IMAGENET_MEAN, IMAGENET_STD)


# Named backbones, and "family:NAME" backbones. Add a family here, not an if-chain elsewhere.
BACKBONES: dict[str, Callable[[BackboneSpec], tuple[nn.Module, InputConfig]]] = {
    "mlp": _build_mlp,
    "cnn": _build_cnn,
    "vit_base": lambda spec: _build_timm("vit_base_patch16_224", spec),
}
FAMILIES: dict[str, Callable[[str, BackboneSpec], tuple[nn.Module, InputConfig]]] = {
    "timm": _build_timm,
    "torchvision": _build_torchvision,
}
BUILTIN_FINETUNE = ("mlp", "cnn")  # trained from scratch, end to end, by default


def is_builtin(name: str) -> bool:
    return name in BUILTIN_FINETUNE


def build_model(spec: BackboneSpec) -> tuple[nn.Module, InputConfig]:
    if ":" in spec.name:
        family, _, model_name = spec.name.partition(":")
        if family not in FAMILIES:
            raise unknown_choice("backbone family", family, FAMILIES)
        return FAMILIES[family](model_name, spec)
    if spec.name not in BACKBONES:
        raise unknown_choice("backbone", spec.name, [*BACKBONES, "timm:NAME", "torchvision:NAME"])
    return BACKBONES[spec.name](spec)


# --------------------------------------------------------------------------- taps

# Default taps per family: the first container attribute a model has decides.
DEFAULT_TAPS: list[tuple[str, list[str]]] = [
    ("blocks", ["blocks.*"]),  # timm ViT/DeiT/EVA, our MLP
    ("stages", ["stages.*"]),  # timm ConvNeXt/RegNet, our CNN
    ("layer4", ["layer1", "layer2", "layer3", "layer4"]),  # ResNet family (timm + torchvision)
    ("encoder", ["encoder.layers.*"]),  # torchvision ViT
    ("layers", ["layers.*"]),  # Swin
    ("features", ["features.*"]),  # torchvision VGG/ConvNeXt/EfficientNet/MobileNet
]


def _glob_to_regex(pattern: str) -> re.Pattern:
    """'*' matches one module-name component, '**' any number of components."""
    out = ""
    for part in re.split(r"(\*\*|\*|\?)", pattern):
        out += {"**": r".*", "*": r"[^.]*", "?": r"[^.]"}.get(part, re.escape(part))
    return re.compile(out + r"\Z")


def resolve_layers(model: nn.Module, patterns: Sequence[str] | None) -> list[str]:
    """Module names matching the globs, in model order; defaults chosen per family."""
    if not patterns:
        for attr, default in DEFAULT_TAPS:
            if isinstance(getattr(model, attr, None), nn.Module):
                patterns = default
                break
        else:
            raise LayaError("no default layers for this model; choose them with --layers 'glob,glob'")
    names = [n for n, _ in model.named_modules() if n]
    regexes = [_glob_to_regex(p) for p in patterns]
    chosen = [n for n in names if any(r.match(n) for r in regexes)]
    if not chosen:
        raise LayaError(f"--layers {','.join(patterns)} matched no module (e.g. {', '.join(names[:5])})")
    return chosen


# --------------------------------------------------------------------------- the tapped model


def pool_tokens(h: Tensor, pool: str) -> Tensor:
    """B×D -> identity, B×C×H×W -> global average, B×N×D -> CLS token or token mean."""
    if h.ndim == 2:
        return h
    if h.ndim == 4:
        return h.mean(dim=(2, 3))
    if h.ndim == 3:
        return h[:, 0] if pool == "cls" else h.mean(dim=1)
    raise LayaError(f"cannot pool a layer output of shape {tuple(h.shape)}")


class InputAdapter(nn.Module):
    """Turns [0, 1] image batches into what the backbone expects (channels, size, norm)."""

    def __init__(self, cfg: InputConfig):
        super().__init__()
        self.channels, self.size = cfg.channels, cfg.size
        self.register_buffer("mean", torch.tensor(cfg.mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1) if x.shape[1] == 1 else x.mean(1, keepdim=True)
        if self.size is not None and tuple(x.shape[-2:]) != tuple(self.size):
            x = F.interpolate(x, size=self.size, mode="bilinear", antialias=True, align_corners=False)
        return (x - self.mean) / self.std


class TappedBackbone(nn.Module):
    """``forward(images) -> [r_1, ..., r_L]``, the pooled outputs of the tapped layers."""

    def __init__(self, model: nn.Module, input_cfg: InputConfig, layer_names: Sequence[str], pool: str):
        super().__init__()
        self.model = model
        self.adapter = InputAdapter(input_cfg)
        self.layer_names = list(layer_names)
        self.pool = pool
        self._taps: list[Tensor | None] = []
        modules = dict(model.named_modules())
        for i, name in enumerate(self.layer_names):
            modules[name].register_forward_hook(self._make_hook(i))

    def _make_hook(self, index: int):
        def hook(module, inputs, output):
            if index >= len(self._taps):  # the model run on its own (or by another TappedBackbone): not ours
                return
            out = output[0] if isinstance(output, (tuple, list)) else output
            self._taps[index] = pool_tokens(out, self.pool)

        return hook

    def forward(self, x: Tensor) -> list[Tensor]:
        self._taps = [None] * len(self.layer_names)
        self.model(self.adapter(x))
        taps, self._taps = self._taps, []
        return taps  # type: ignore[return-value]

    @torch.no_grad()
    def dims(self, example: Tensor) -> list[int]:
        was_training = self.training
        self.eval()
        dims = [r.shape[-1] for r in self(example[:1])]
        self.train(was_training)
        return dims


def _auto_pool(model: nn.Module, pool: str) -> str:
    if pool != "auto":
        return pool
    return "cls" if getattr(model, "cls_token", None) is not None or getattr(model, "class_token", None) is not None else "mean"


def build_backbone(spec: BackboneSpec, state_dict: dict | None = None) -> TappedBackbone:
    model, input_cfg = build_model(spec)
    if state_dict is not None:
        load_state(model, state_dict, spec.name)
    spec.layers = resolve_layers(model, spec.layers)
    spec.pool = _auto_pool(model, spec.pool)
    return TappedBackbone(model, input_cfg, spec.layers, spec.pool)


# --------------------------------------------------------------------------- weights files

CLASSIFIER_KEYS = ("head.", "fc.", "classifier.", "heads.", "head_dist.", "last_linear.")


def read_weights_file(path: str | Path, trust_pickle: bool = False) -> dict | nn.Module:
    """A state dict from .pt/.pth/.bin (weights_only) or .safetensors; a module only if trusted."""
    from .trust import load_trusted_pickle, safe_torch_load

    path = Path(path).expanduser()
    if path.suffix == ".safetensors" and path.is_file():
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as e:
            raise LayaError(f"cannot read weights file {path}: {type(e).__name__}") from None
    if trust_pickle:
        obj = load_trusted_pickle(path) if path.is_file() else safe_torch_load(path, "weights file")
    else:
        try:
            obj = safe_torch_load(path, "weights file")
        except LayaError as e:
            if "pickled Python objects" in str(e):
                raise LayaError(f"{e}; if it is a pickled model you trust, add --trust-pickle") from None
            raise
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
        if obj and all(isinstance(v, Tensor) for v in obj.values()):
            return {k.removeprefix("module."): v for k, v in obj.items()}
    raise LayaError(f"{path} holds no state dict of tensors")


def load_state(model: nn.Module, state_dict: dict, name: str) -> None:
    """Load weights; the checkpoint's own classifier is ignored (we replace it with a head)."""
    try:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
    except RuntimeError as e:  # shape mismatches
        detail = next((l.strip() for l in str(e).splitlines() if "mismatch" in l), "shape mismatch")
        raise LayaError(f"weights do not fit {name}: {detail[:200]}") from None
    unexpected = [k for k in unexpected if not k.startswith(CLASSIFIER_KEYS)]
    missing = [k for k in missing if not k.startswith(CLASSIFIER_KEYS)]
    if missing or unexpected:
        sample = ", ".join((missing or unexpected)[:3])
        raise LayaError(
            f"weights do not fit {name}: {len(missing)} missing, {len(unexpected)} unexpected keys (e.g. {sample})"
        )


def state_fingerprint(state: dict[str, Tensor]) -> str:
    """A content hash of a state dict: part of the feature-cache key."""
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().cpu().contiguous()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]
