"""Backbone families: one registry, every family answering the same small interface.

A family knows how to build its models, which layers to tap by default (from the ecosystem's
own feature API where there is one), how its tap outputs are laid out, and how to cut a model
after a tap. Add a family here, not an if-chain elsewhere.

==============  =========================================  =====================================
family          default taps                               layouts
==============  =========================================  =====================================
``builtin``     ``blocks.*`` (mlp), ``stages.*`` (cnn)     B×D, B×C×H×W
``timm``        ``model.feature_info`` (timm's own stages  ``output_fmt`` (NHWC: Swin…) and
                or blocks: what ``features_only`` returns) ``num_prefix_tokens`` of the model;
                by module where hooks read them, else      ``feature_info.<i>``: NCHW, or NLC+P
                ``feature_info.<i>`` (``stages.py``)       with the prefix tokens timm returns
``torchvision`` per family (``TORCHVISION_TAPS``)          per family (Swin NHWC, ViT NLC+1)
``arch``        the model's ``feature_info`` if it has     its ``output_fmt``/``num_prefix_tokens``
                one, else the longest run of blocks        attributes if any, else NCHW / NLC+0
``pt2``         the longest run of blocks                  NCHW / NLC+0
``hf``          every layer after the embeddings (the      text: NLC with its attention mask;
                ModuleList whose outputs are the model's   vision: NLC+P (CLS, registers),
                ``hidden_states``), ``hf.py``              NCHW stages (ConvNeXt)
==============  =========================================  =====================================
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from ..runtime.errors import LayaError, unknown_choice
from .builtin import PaperMLP, SmallCNN
from .chain import chain_children, generic_default_taps, stage_ends
from .engines import stage_index
from .family import Family, Probe, _declared_layouts, _feature_info_modules, _first_line, _norm_for  # noqa: F401
from .hf import HFFamily
from .pooling import Layouts
from .spec import IMAGENET_MEAN, IMAGENET_STD, InputConfig
from .stages import declared_stages, hooks_read_stages, stage_indices, stage_names, stage_widths
from .taps import match_layers
from .weights import (
    hf_cache_dir,
    hub_file_cached,
    hub_session,
    offline,
    pretrained_unavailable,
    require_download,
    torch_hub_cached,
)

# --------------------------------------------------------------------------- built-ins


class BuiltinFamily(Family):
    name = "builtin"
    MODELS = {"mlp": "blocks", "cnn": "stages"}

    def build(self, model_name, spec, **_):
        if model_name == "mlp":
            h, w = spec.image_size
            model: nn.Module = PaperMLP(spec.in_channels * h * w)
        else:
            model = SmallCNN(spec.in_channels)
        return model, InputConfig(spec.in_channels, None, (0.5,), (0.5,))

    def owns(self, model):
        return isinstance(model, (PaperMLP, SmallCNN))

    def layouts(self, model):
        return Layouts()

    def default_taps(self, model, probe):
        attr = "blocks" if isinstance(model, PaperMLP) else "stages"
        return [f"{attr}.{i}" for i in range(len(getattr(model, attr)))]

    def truncate(self, model, taps, k):
        attr = "blocks" if isinstance(model, PaperMLP) else "stages"
        keep = [int(t.split(".")[1]) for t in taps[:k] if t.startswith(attr + ".") and t.count(".") >= 1]
        if len(keep) != k:
            return None
        setattr(model, attr, getattr(model, attr)[: max(keep) + 1])
        return model


# --------------------------------------------------------------------------- timm


class TimmFamily(Family):
    """timm models: taps from ``feature_info``, layouts from ``output_fmt``/``num_prefix_tokens``,
    truncation with ``prune_intermediate_layers``."""

    name = "timm"
    hub = True

    def _check_name(self, model_name: str) -> None:
        import timm

        if model_name not in timm.list_models() and model_name not in timm.list_models(pretrained=True):
            raise unknown_choice("timm model", model_name, timm.list_models())

    def build(self, model_name, spec, **_):
        import timm

        self._check_name(model_name)
        kwargs = {"img_size": spec.input_size} if spec.input_size else {}
        cached = spec.pretrained and self.check_pretrained(model_name)
        if spec.pretrained and getattr(timm.get_pretrained_cfg(model_name), "hf_hub_id", None):
            kwargs["cache_dir"] = str(hf_cache_dir())  # HF_HOME as set now, not at import
        try:
            with hub_session(offline_now=bool(cached) or offline()):
                try:
                    model = timm.create_model(model_name, pretrained=spec.pretrained, num_classes=0, **kwargs)
                except TypeError as e:  # CNNs take any size and no img_size argument
                    if "img_size" not in str(e):
                        raise
                    kwargs.pop("img_size")
                    model = timm.create_model(model_name, pretrained=spec.pretrained, num_classes=0, **kwargs)
        except LayaError:
            raise
        except Exception as e:
            if spec.pretrained:
                raise pretrained_unavailable(
                    f"timm:{model_name}", f"{type(e).__name__}: {_first_line(e)[:80]}"
                ) from None
            raise LayaError(f"could not create timm:{model_name}: {type(e).__name__}: {_first_line(e)}") from None
        cfg = model.pretrained_cfg
        c, h, w = cfg.get("input_size", (3, 224, 224))
        if spec.input_size:
            h = w = spec.input_size
        return model, InputConfig(c, (h, w), tuple(cfg.get("mean", IMAGENET_MEAN)), tuple(cfg.get("std", IMAGENET_STD)))

    def owns(self, model):
        return type(model).__module__.startswith("timm.")

    def check_pretrained(self, model_name: str) -> bool:
        from urllib.parse import urlparse

        import timm

        self._check_name(model_name)
        cfg = timm.get_pretrained_cfg(model_name)
        if cfg is None or not (cfg.hf_hub_id or cfg.url or cfg.file):
            raise LayaError(
                f"timm:{model_name} has no pretrained weights: pass --weights FILE, or train it from "
                "scratch with --no-pretrained --finetune"
            )
        if cfg.file:
            return True
        if cfg.hf_hub_id and hub_file_cached(
            cfg.hf_hub_id, ("model.safetensors", "pytorch_model.bin", cfg.hf_hub_filename)
        ):
            return True
        if cfg.url and not cfg.hf_hub_id and torch_hub_cached(cfg.url).is_file():  # timm prefers the HF hub
            return True
        host = "huggingface.co" if cfg.hf_hub_id else (urlparse(cfg.url).hostname or "")
        return require_download(f"timm:{model_name}", host, f"{cfg.hf_hub_id or cfg.url} is not in the local hub cache")

    def input_side(self, model_name, spec):
        if spec.input_size:
            return spec.input_size
        import timm

        self._check_name(model_name)
        cfg = timm.get_pretrained_cfg(model_name)
        return int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224

    def default_taps(self, model, probe):
        """The stages ``feature_info`` declares: their modules, when hooks on them read what timm's own
        ``forward_intermediates`` reads on the probe batch; else the stages themselves, ``feature_info.<i>``,
        read from ``forward_intermediates`` (``stages.py``)."""
        stages = declared_stages(model)
        modules = [m for m, _ in stages]
        hookable = bool(modules) and all(modules) and len(set(modules)) == len(modules)
        readable = stage_names(model)
        if hookable and (not readable or hooks_read_stages(model, modules, self.layouts(model), probe())):
            return modules  # type: ignore[return-value]
        return readable or super().default_taps(model, probe)

    def candidates(self, model):
        return [*super().candidates(model), *stage_names(model)]

    def engine_for(self, model, taps):
        stages = sum(stage_index(t) is not None for t in taps)
        if stages and stages < len(taps):
            raise LayaError(
                "the layers mix timm stages (feature_info.<i>, read from forward_intermediates) with modules "
                "(read by hooks); choose one kind with --layers"
            )
        return "intermediates" if stages else "hooks"

    def expected_widths(self, model, taps):
        return stage_widths(model, taps)

    def truncate(self, model, taps, k):
        index = stage_indices(model)
        if not hasattr(model, "prune_intermediate_layers") or not all(t in index for t in taps[:k]):
            return None
        try:
            model.prune_intermediate_layers(indices=[index[t] for t in taps[:k]], prune_norm=True, prune_head=True)
        except Exception:
            return None
        return model

    def weights_source(self, model_name, spec, model):
        if not spec.pretrained:
            return "random initialisation"
        cfg = model.pretrained_cfg
        return f"timm pretrained {cfg.get('hf_hub_id') or cfg.get('url') or model_name}"


# --------------------------------------------------------------------------- torchvision

# Default taps per torchvision family (the module a model class lives in):
#   ("names", [...])       these modules
#   ("stages", container)  the last child of the container at each spatial resolution
#   ("blocks", container)  every child of the container (isotropic models)
TORCHVISION_TAPS: dict[str, tuple[str, object]] = {
    "resnet": ("names", ["layer1", "layer2", "layer3", "layer4"]),  # ResNet, ResNeXt, Wide ResNet
    "vgg": ("stages", "features"),
    "mobilenetv2": ("stages", "features"),
    "mobilenetv3": ("stages", "features"),
    "efficientnet": ("stages", "features"),  # EfficientNet and EfficientNetV2
    "mnasnet": ("stages", "layers"),
    "squeezenet": ("stages", "features"),
    "densenet": ("stages", "features"),
    "convnext": ("stages", "features"),  # the 4 stages, not the downsampling layers between them
    "regnet": ("stages", "trunk_output"),
    "maxvit": ("stages", "blocks"),
    "swin_transformer": ("stages", "features"),
    "vision_transformer": ("blocks", "encoder.layers"),
    "shufflenetv2": ("names", ["stage2", "stage3", "stage4", "conv5"]),
    "googlenet": ("names", ["conv3", "inception3b", "inception4e", "inception5b"]),
    "inception": ("names", ["Conv2d_4a_3x3", "Mixed_5d", "Mixed_6e", "Mixed_7c"]),
}
TORCHVISION_LAYOUTS = {"swin_transformer": Layouts("NHWC"), "vision_transformer": Layouts("NCHW", 1)}


def _tv_family(model: nn.Module) -> str:
    return type(model).__module__.rsplit(".", 1)[-1]


class TorchvisionFamily(Family):
    """torchvision classification models, read through ``torchvision.models.feature_extraction``."""

    name = "torchvision"
    engine = "fx"
    hub = True

    def _weights_enum(self, model_name):
        import torchvision

        try:
            return torchvision.models.get_model_weights(model_name).DEFAULT
        except Exception:
            return None

    def build(self, model_name, spec, **_):
        import torchvision

        self._check_name(model_name)
        weights = self._weights_enum(model_name)
        kwargs = {}
        if spec.input_size and model_name.startswith("vit_"):
            if spec.pretrained and spec.input_size != 224:
                raise LayaError(
                    f"torchvision:{model_name} pretrained weights are for 224×224 inputs; drop --input-size"
                )
            kwargs["image_size"] = spec.input_size
        if spec.pretrained:
            self.check_pretrained(model_name)
        try:
            model = torchvision.models.get_model(model_name, weights=weights if spec.pretrained else None, **kwargs)
        except Exception as e:
            if spec.pretrained:
                raise pretrained_unavailable(
                    f"torchvision:{model_name}", f"{type(e).__name__}: {_first_line(e)[:80]}"
                ) from None
            raise LayaError(
                f"could not create torchvision:{model_name}: {type(e).__name__}: {_first_line(e)}"
            ) from None
        size, mean, std = 224, IMAGENET_MEAN, IMAGENET_STD
        if weights is not None:
            t = weights.transforms()
            size, mean, std = int(t.crop_size[0]), tuple(t.mean), tuple(t.std)
        size = spec.input_size or size
        return model, InputConfig(3, (size, size), mean, std)

    def owns(self, model):
        return type(model).__module__.startswith("torchvision.models")

    def _check_name(self, model_name: str) -> None:
        import torchvision

        names = torchvision.models.list_models(module=torchvision.models)
        if model_name not in names:
            raise unknown_choice("torchvision model", model_name, names)

    def check_pretrained(self, model_name: str) -> bool:
        self._check_name(model_name)
        weights = self._weights_enum(model_name)
        if weights is None:
            raise LayaError(
                f"torchvision:{model_name} has no pretrained weights: pass --weights FILE, or train it "
                "from scratch with --no-pretrained --finetune"
            )
        cached = torch_hub_cached(weights.url)
        if cached.is_file():
            return True
        return require_download(
            f"torchvision:{model_name}", "download.pytorch.org", f"{cached} is missing", "LAYA_OFFLINE"
        )

    def input_side(self, model_name, spec):
        if spec.input_size:
            return spec.input_size
        weights = self._weights_enum(model_name)
        return int(weights.transforms().crop_size[0]) if weights is not None else 224

    def layouts(self, model):
        return TORCHVISION_LAYOUTS.get(_tv_family(model), Layouts())

    def default_taps(self, model, probe):
        rule = TORCHVISION_TAPS.get(_tv_family(model))
        if rule is None:
            return generic_default_taps(model, self.layouts(model), probe())
        kind, what = rule
        if kind == "names":
            return list(what)
        names, outputs = chain_children(model, what, probe())
        if kind == "blocks":
            return names
        return stage_ends(names, outputs, self.layouts(model))

    def select_layers(self, model, patterns, probe):
        try:
            return super().select_layers(model, patterns, probe)
        except LayaError:  # torchvision's own graph node names (e.g. layer1.0.add)
            nodes = self.graph_nodes(model)
            if not nodes:
                raise
            try:
                return match_layers(nodes, patterns)
            except LayaError:
                pass
            raise

    def graph_nodes(self, model: nn.Module) -> list[str]:
        """torchvision's own node names (``get_graph_node_names``, eval graph), in graph order."""
        import warnings

        from torchvision.models.feature_extraction import get_graph_node_names

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return list(get_graph_node_names(model)[1])
        except Exception:
            return []

    def weights_source(self, model_name, spec, model):
        if not spec.pretrained:
            return "random initialisation"
        weights = self._weights_enum(model_name)
        return f"torchvision pretrained {weights} ({weights.url})"


# --------------------------------------------------------------------------- your own code


class ArchFamily(Family):
    """``--arch module.path:callable`` / ``path/file.py:callable``: your own ``nn.Module``."""

    name = "arch"

    def build(self, model_name, spec, **_):
        from .usercode import build_user_module

        model = build_user_module(model_name)
        cfg = getattr(model, "pretrained_cfg", None)
        if isinstance(cfg, dict) and cfg.get("input_size"):
            c, h, w = cfg["input_size"]
            size = (spec.input_size,) * 2 if spec.input_size else (h, w)
            return model, InputConfig(
                c, size, tuple(cfg.get("mean", IMAGENET_MEAN)), tuple(cfg.get("std", IMAGENET_STD))
            )
        conv = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
        channels = conv.in_channels if conv is not None else spec.in_channels
        mean, std = _norm_for(channels)
        size = (spec.input_size, spec.input_size) if spec.input_size else None
        return model, InputConfig(channels, size, mean, std)

    def input_side(self, model_name, spec):
        return spec.input_size


class ProgramFamily(Family):
    """A ``torch.export`` program (``.pt2``): loaded without unpickling, tapped by module name."""

    name = "pt2"

    def build(self, model_name, spec, *, program=None, trust_pickle=False):
        from .program import load_program

        if spec.finetune:
            raise LayaError(
                "a torch.export program (.pt2) is an inference graph: it can only be a frozen backbone "
                "(drop --finetune)"
            )
        where = model_name
        if program is None:
            path = Path(model_name)
            if not path.is_file():
                raise LayaError(f"torch.export program not found: {path}")
            if path.stat().st_size == 0:
                raise LayaError(f"torch.export program {path} is empty (0 bytes)")
            program = path.read_bytes()
        module, (c, h, w) = load_program(program, where, trust_pickle)
        module.laya_program = program  # carried into the checkpoint (the program holds its own weights)
        if c is None:
            raise LayaError(f"{where} takes a dynamic number of channels; export it with a fixed one")
        size = (h, w) if h is not None and w is not None else ((spec.input_size,) * 2 if spec.input_size else None)
        mean, std = _norm_for(c)
        return module, InputConfig(c, size, mean, std)

    def owns(self, model):
        return type(model).__name__ == "UnflattenedModule"

    def layouts(self, model):
        return Layouts()

    def default_taps(self, model, probe):
        types = getattr(model, "laya_module_types", {})
        is_container = lambda name, m: types.get(name, "").rsplit(".", 1)[-1] in ("Sequential", "ModuleList")
        return generic_default_taps(model, self.layouts(model), probe(), is_container)

    def weights_source(self, model_name, spec, model):
        return f"torch.export program {model_name}"


class GenericFamily(Family):
    """Any other module (used by ``resolve_layers`` on a model laya did not build)."""


BUILTIN = BuiltinFamily()
FAMILIES: dict[str, Family] = {
    "timm": TimmFamily(),
    "torchvision": TorchvisionFamily(),
    "arch": ArchFamily(),
    "pt2": ProgramFamily(),
    "hf": HFFamily(),
}
BACKBONES: dict[str, tuple[Family, str]] = {  # named backbones
    "mlp": (BUILTIN, "mlp"),
    "cnn": (BUILTIN, "cnn"),
    "vit_base": (FAMILIES["timm"], "vit_base_patch16_224"),
}
GENERIC = GenericFamily()


def family_of(name: str) -> tuple[Family, str]:
    """The family and model name behind a backbone name."""
    if name in BACKBONES:
        return BACKBONES[name]
    prefix, sep, rest = name.partition(":")
    if sep and prefix in FAMILIES:
        return FAMILIES[prefix], rest
    if sep and prefix and prefix not in FAMILIES and "/" not in prefix and "\\" not in prefix and len(prefix) > 1:
        raise unknown_choice("backbone family", prefix, FAMILIES)
    raise unknown_choice("backbone", name, [*BACKBONES, "timm:NAME", "torchvision:NAME", "hf:NAME", "FILE.pt2"])


def family_for_model(model: nn.Module) -> Family:
    for family in (BUILTIN, *FAMILIES.values()):
        if family.owns(model):
            return family
    return GENERIC
