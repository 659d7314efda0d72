"""The interface every backbone family answers (``Family``), and the conventions families share.

A family knows how to build its models, which layers to tap by default (from the ecosystem's own feature API
where there is one), how its tap outputs are laid out, and how to cut a model after a tap. The registry of
families is ``registry.py``; a family with a module of its own (``hf.py``) builds on this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn

from ..runtime.errors import LayaError
from .chain import generic_default_taps
from .pooling import Layouts
from .spec import IMAGENET_MEAN, IMAGENET_STD, BackboneSpec, InputConfig
from .stages import feature_info
from .taps import match_layers

Probe = Callable[[], Tensor]  # a batch of model inputs, made only when a rule needs to run the model


def _norm_for(channels: int) -> tuple[tuple, tuple]:
    return (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.5,) * channels, (0.5,) * channels)


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def _declared_layouts(model: nn.Module) -> Layouts:
    """timm's conventions, also honoured on your own modules: ``output_fmt`` and
    ``num_prefix_tokens`` (or a ``cls_token``/``class_token`` attribute: one prefix token)."""
    fmt = getattr(model, "output_fmt", "NCHW")
    fmt = getattr(fmt, "value", fmt)
    prefix = getattr(model, "num_prefix_tokens", None)
    if not isinstance(prefix, int):
        prefix = int(getattr(model, "cls_token", None) is not None or getattr(model, "class_token", None) is not None)
    return Layouts("NHWC" if fmt == "NHWC" else "NCHW", prefix)


def _feature_info_modules(model: nn.Module) -> list[tuple[str, int | None]]:
    """(module, channels) of a timm-style ``feature_info``; [] when the model has none."""
    out = []
    for entry in feature_info(model):
        if isinstance(entry.get("module"), str):
            out.append((entry["module"], entry.get("num_chs")))
    names = {n for n, _ in model.named_modules()}
    return out if out and all(m in names for m, _ in out) else []


class Family:
    """The interface. Override what differs; the defaults suit a plain ``nn.Module``."""

    name = "generic"
    engine = "hooks"  # how taps are read (taps.ENGINES): forward hooks, "fx" (torchvision's feature extraction)…
    hub = False  # pretrained by default when frozen

    def build(
        self, model_name: str, spec: BackboneSpec, *, program: bytes | None = None, trust_pickle: bool = False
    ) -> tuple[nn.Module, InputConfig]:
        raise NotImplementedError

    def owns(self, model: nn.Module) -> bool:
        return False

    def input_side(self, model_name: str, spec: BackboneSpec) -> int | None:
        """Side at which file datasets are decoded for this backbone (cheap: no model built)."""
        return spec.input_size

    def layouts(self, model: nn.Module) -> Layouts:
        return _declared_layouts(model)

    def default_taps(self, model: nn.Module, probe: Probe) -> list[str]:
        fi = _feature_info_modules(model)
        if fi:
            return [m for m, _ in fi]
        return generic_default_taps(model, self.layouts(model), probe())

    def candidates(self, model: nn.Module) -> list[str]:
        """Names that ``--layers`` globs match, in model order."""
        return [n for n, _ in model.named_modules() if n]

    def engine_for(self, model: nn.Module, taps: Sequence[str]) -> str:
        """The engine (``taps.ENGINES``) that reads these taps of ``model``."""
        return self.engine

    def select_layers(self, model: nn.Module, patterns: Sequence[str], probe: Probe) -> list[str]:
        """The taps ``--layers`` names: module names matching its globs, in model order."""
        return match_layers(self.candidates(model), patterns)

    def prepare(self, model: nn.Module) -> None:
        """Anything a model needs before it is tapped (hf: gradients from integer token ids)."""

    def expected_widths(self, model: nn.Module, taps: Sequence[str]) -> list[int | None]:
        chans = dict(_feature_info_modules(model))
        return [chans.get(t) for t in taps]

    def truncate(self, model: nn.Module, taps: Sequence[str], k: int) -> nn.Module | None:
        """This family's own way to cut ``model`` after tap k, or None for the generic one."""
        return None

    def check_pretrained(self, model_name: str) -> bool:
        """Before any work: True when the pretrained weights are cached locally, False when they
        can be downloaded, a one-line error when neither."""
        raise LayaError(f"{self.name} backbones have no published weights; drop --pretrained")

    def default_pool(self, model: nn.Module) -> str:
        return "cls" if self.layouts(model).prefix else "mean"

    def weights_source(self, model_name: str, spec: BackboneSpec, model: nn.Module) -> str:
        return "random initialisation"
