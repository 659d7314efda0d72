"""Building a backbone, tapping it, and restoring it from a checkpoint.

Every backbone family answers the same small interface (``families.Family``): it builds the
model and its input config, names the default taps (timm's ``feature_info``, torchvision's
feature-extraction nodes, …), declares how tap outputs are laid out, and how to cut the model
after a tap. ``build_backbone`` puts a family's model into a ``TappedBackbone``, which returns
``[r_1, ..., r_L]`` — or runs only up to tap k, or continues from tap k (``taps.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor, nn

from ..runtime.errors import LayaError
from ..runtime.progress import log
from .adapters import InputAdapter, make_adapter, random_tokens
from .blocks import block_taps
from .builtin import PaperMLP, SmallCNN
from .chain import eval_mode, trace_calls
from .pooling import Layouts, TapFormat, pool_tokens
from .registry import BACKBONES, BUILTIN, FAMILIES, Family, family_for_model, family_of
from .spec import IMAGENET_MEAN, IMAGENET_STD, BackboneSpec, InputConfig, TextInput
from .taps import TappedBackbone
from .usercode import trust_code
from .weights import (
    CLASSIFIER_KEYS,
    file_sha256,
    load_state,
    read_weights_file,
    state_fingerprint,
    weights_sha256,
)

BUILTIN_FINETUNE = ("mlp", "cnn")  # trained from scratch, end to end, by default

__all__ = [
    "BACKBONES",
    "FAMILIES",
    "BUILTIN_FINETUNE",
    "BackboneSpec",
    "InputConfig",
    "InputAdapter",
    "Layouts",
    "PaperMLP",
    "SmallCNN",
    "TapFormat",
    "TappedBackbone",
    "CLASSIFIER_KEYS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "backbone_from_checkpoint",
    "backbone_name",
    "build_backbone",
    "check_sha256",
    "reshaped_backbone",
    "tap_model",
    "build_model",
    "checkpoint_extras",
    "checkpoint_weights",
    "default_pretrained",
    "family_of",
    "input_side",
    "is_builtin",
    "load_state",
    "pool_tokens",
    "preflight",
    "read_weights_file",
    "resolve_layers",
    "state_fingerprint",
    "trust_code",
    "weights_sha256",
]


def is_builtin(name: str) -> bool:
    return name in BUILTIN_FINETUNE


def backbone_name(backbone: str, arch: str | None = None) -> str:
    """The spec name for ``--backbone`` / ``--arch``: ``FILE.pt2`` -> ``pt2:/abs/FILE.pt2``;
    ``--arch module:callable`` -> ``arch:module:callable`` (and trusts that code: the user named it)."""
    if arch:
        if backbone not in ("mlp", "", None):
            raise LayaError("--arch names the backbone's architecture; drop --backbone")
        if arch.startswith(("timm:", "torchvision:")):
            return arch
        if arch.endswith(".pt2"):
            return backbone_name(arch)
        return "arch:" + trust_code(arch)
    if backbone.endswith(".pt2") and not backbone.startswith("pt2:"):
        return "pt2:" + str(Path(backbone).expanduser().resolve())
    prefix, _, rest = backbone.partition(":")
    if prefix == "hf" and (Path(rest).expanduser().is_dir() or rest.startswith((".", "~"))):
        return "hf:" + str(Path(rest).expanduser().resolve())  # a save_pretrained folder: found from any directory
    return backbone


def default_pretrained(name: str, finetune: bool, weights: str | None = None) -> bool:
    """Hub backbones start from their pretrained weights unless a --weights file is given, frozen or fine-tuned
    (as timm and transformers do: fine-tuning starts from the weights named); random only with --no-pretrained."""
    family, _ = family_of(name)
    return family.hub and not weights


RANDOM_START = "random initialisation"  # the weights_source of a backbone no weights were loaded into


def frozen_random(finetune: bool, weights_source: str) -> bool:
    """A backbone that was never trained: frozen, and started from random weights (no pretrained ones, no file)."""
    return not finetune and weights_source.startswith(RANDOM_START)


UPSCALE_WARN_FACTOR = 4  # a model from scratch fed images this many times their own side (28 px at 224: 8×)


def fitting_side(side: int) -> int:
    """An input side that fits images of ``side`` pixels: their own, rounded up to a multiple of 32 (what a CNN's
    five halvings and a ViT's patches take)."""
    return max(32, -(-int(side) // 32) * 32)


def upscale_warning(image_hw, input_hw, weights_source: str) -> str | None:
    """A warning when a backbone from random initialisation is fed images upscaled ``UPSCALE_WARN_FACTOR``× or more
    (28-px images at 224 px: 64× the pixels to learn from scratch, nothing gained; issue 71: 8 min 21 s to end at
    chance on Fashion-MNIST, 54 s to 0.675 at 32 px); None otherwise. A pretrained one is fed its own size."""
    if not weights_source.startswith(RANDOM_START) or not input_hw or not image_hw:
        return None
    side, target = max(image_hw), max(input_hw)
    if target < UPSCALE_WARN_FACTOR * side:
        return None
    return (
        f"the images are {side} px and the backbone, started from random initialisation, sees them at {target} px "
        f"({target / side:.0f}× upscaled: {(target / side) ** 2:.0f}× the work for no new detail); from scratch, pass "
        f"--input-size {fitting_side(side)} (the images' own side rounded up to 32)"
    )


def frozen_random_warning(name: str) -> str:
    """What a frozen random backbone means, and what gives a useful model instead (for ``name``'s family)."""
    remedy = (
        "its pretrained weights (the default), --weights FILE, or --finetune"
        if family_of(name)[0].hub
        else ("--finetune (the built-ins' default) or --weights FILE")
    )
    return (
        f"{name} is frozen at its random initialisation: its features are random projections, not what a trained "
        f"network computes; train it from {remedy}"
    )


def start_line(backbone: TappedBackbone, weights_file: str | None) -> str:
    """What a run starts from, said before it trains: the weights, and whether they are trained too."""
    spec = backbone.spec
    source = f"the weights in {weights_file}" if weights_file else backbone.weights_source
    how = "fine-tuned end to end" if spec.finetune else "frozen (features cached)"
    if source.startswith(RANDOM_START):
        source += " (--no-pretrained)" if family_of(spec.name)[0].hub else ""
    return f"{spec.name}: starts from {source}; {how}"


def preflight(
    backbone: str, arch: str | None, finetune: bool | None, pretrained: bool | None, weights: str | None
) -> None:
    """Fail before any data is loaded: an unknown backbone, or pretrained weights that are
    neither cached nor downloadable (one line, naming --weights, the caches and --no-pretrained)."""
    name = backbone_name(backbone, arch)
    family, model_name = family_of(name)
    finetune = is_builtin(name) if finetune is None else finetune
    if default_pretrained(name, finetune, weights) if pretrained is None else pretrained:
        family.check_pretrained(model_name)


def build_model(
    spec: BackboneSpec, *, program: bytes | None = None, trust_pickle: bool = False
) -> tuple[nn.Module, InputConfig]:
    family, model_name = family_of(spec.name)
    return family.build(model_name, spec, program=program, trust_pickle=trust_pickle)


def input_side(spec: BackboneSpec) -> int | None:
    """Side at which file datasets are decoded for this backbone: its input size (32 for mlp/cnn); None for a
    model that takes no images (a text model: its input is tokens)."""
    family, model_name = family_of(spec.name)
    if family is BUILTIN:
        return spec.input_size or 32
    side = family.input_side(model_name, spec)
    if side is None:
        _, cfg = build_model(spec)
        if isinstance(cfg, TextInput):
            return None
        side = max(cfg.size) if cfg.size else 224
    return int(side)


def _default_probe(model: nn.Module) -> Tensor:
    return torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))


def resolve_layers(
    model: nn.Module,
    patterns: Sequence[str] | None,
    family: Family | None = None,
    probe: Callable[[], Tensor] | None = None,
    taps: str = "blocks",
) -> list[str]:
    """Module names matching the globs, in model order; without globs ``taps``: ``blocks``, a CNN's residual blocks
    (``blocks.block_taps``) where it has at least 3, else (and for ``stages``) the family's default taps."""
    family = family or family_for_model(model)
    if not patterns and taps == "blocks" and (found := block_taps(model, probe or (lambda: _default_probe(model)))):
        return found
    if not patterns:
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                taps = family.default_taps(model, probe or (lambda: _default_probe(model)))
        finally:
            model.train(was)
        if not taps:
            raise LayaError("no default layers for this model; choose them with --layers 'glob,glob'")
        return taps
    return family.select_layers(model, patterns, probe or (lambda: _default_probe(model)))


def _shape_probe(input_cfg: InputConfig | TextInput, shape: tuple[int, ...]) -> Callable[[], Tensor]:
    def probe() -> Tensor:
        adapter = make_adapter(input_cfg)
        if isinstance(input_cfg, TextInput):
            return adapter(random_tokens(input_cfg, 2))
        return adapter(torch.rand(2, *shape, generator=torch.Generator().manual_seed(0)))

    return probe


def tap_model(
    model: nn.Module,
    input_cfg: InputConfig,
    spec: BackboneSpec,
    *,
    family: Family | None = None,
    example_shape: tuple[int, ...] | None = None,
) -> TappedBackbone:
    """Wrap a built ``model`` in a ``TappedBackbone``: the spec's taps (its family's defaults without
    globs), its pool (``auto``: the family's choice) and tap formats. ``family``: the model's family
    (default: the one that owns it, e.g. a timm or torchvision model a user built). ``example_shape``:
    (C, H, W) of a probe input for families that choose default taps by running the model; None:
    ``resolve_layers``' default probe. The caller's spec is left as it was; ``backbone.spec`` is the
    resolved copy (layer names, pool and tap formats filled in) that a checkpoint stores."""
    spec = replace(spec, layers=list(spec.layers), formats=list(spec.formats))
    family = family or family_for_model(model)
    family.prepare(model)
    probe = None if example_shape is None else _shape_probe(input_cfg, tuple(example_shape))
    layers = resolve_layers(model, spec.layers, family, probe, spec.taps)
    if layers != spec.layers:
        spec.formats = []
    spec.layers = layers
    if spec.pool == "auto":
        spec.pool = family.default_pool(model)
    formats = spec.formats if len(spec.formats) == len(layers) else None
    return TappedBackbone(
        model,
        input_cfg,
        layers,
        spec.pool,
        formats,
        family=family,
        engine=family.engine_for(model, layers),
        layouts=family.layouts(model),
        expected_widths=family.expected_widths(model, layers),
        example_shape=example_shape,
        spec=spec,
    )  # type: ignore[arg-type]


def check_sha256(state_dict: dict, expect_sha256: str | None, where: str) -> None:
    """Refuse backbone weights whose SHA-256 differs from the one a checkpoint recorded."""
    if expect_sha256:
        got = weights_sha256(state_dict)
        if got != expect_sha256:
            raise LayaError(
                f"the backbone weights differ from those the checkpoint was trained with (sha256 "
                f"{expect_sha256[:12]}… recorded, {got[:12]}… loaded from {where}); refusing to use them"
            )


def build_backbone(
    spec: BackboneSpec,
    state_dict: dict | None = None,
    *,
    program: bytes | None = None,
    trust_pickle: bool = False,
    expect_sha256: str | None = None,
) -> TappedBackbone:
    """Build the spec's model, load ``state_dict`` into it, resolve the taps and wrap it in a
    ``TappedBackbone`` (``tap_model``). The caller's spec is left as it was; ``backbone.spec`` is the
    resolved copy (layer names, pool and tap formats filled in) that a checkpoint stores.

    ``expect_sha256``: the weights must hash to it — the stored ``state_dict`` when one is given
    (what was recorded; a classifier of another shape that ``load_state`` leaves out does not
    matter, the taps never read it), else the model's own weights (the hub's, a program's)."""
    family, model_name = family_of(spec.name)
    model, input_cfg = family.build(model_name, spec, program=program, trust_pickle=trust_pickle)
    if state_dict is not None and not spec.reshaped:
        load_state(model, state_dict, spec.name)
    backbone = tap_model(model, input_cfg, spec, family=family, example_shape=(spec.in_channels, *spec.image_size))
    backbone.weights_source = family.weights_source(model_name, spec, model)
    _say_initialised(backbone, spec.name)
    if spec.reshaped:  # a truncated / dropped checkpoint: reshape the model, then load the weights it kept
        backbone = reshaped_backbone(backbone, state_dict, spec.name)
    where = "the hub's pretrained weights" if spec.pretrained and state_dict is None else "the stored weights"
    check_sha256(state_dict if state_dict is not None else backbone.model.state_dict(), expect_sha256, where)
    return backbone


def _say_initialised(backbone: TappedBackbone, name: str) -> None:
    """One warning naming the weights the model's library initialised because its files lack them (recorded in the
    checkpoint), and whether any lies on a tap's path (then the taps read random weights)."""
    missing = list(getattr(backbone.model, "laya_initialised_weights", None) or [])
    if not missing:
        return
    with torch.no_grad(), eval_mode(backbone.model):
        ran = trace_calls(backbone.model, backbone.adapter(backbone.probe_input()), stop_when=backbone.layer_names)
    on_path = [w for w in missing if w.rpartition(".")[0] in ran]
    shown = ", ".join(missing[:4]) + (f", … ({len(missing)} in all)" if len(missing) > 4 else "")
    where = (
        f"{len(on_path)} of them on a tap's path: the taps read randomly initialised weights there"
        if on_path
        else "on no tap's path: the taps do not read them"
    )
    log(
        f"[yellow]warning:[/] {name} lacks weights its model creates ({shown}); "
        f"initialised the same at every load, {where}"
    )


def reshaped_backbone(backbone: TappedBackbone, state_dict: dict | None, name: str) -> TappedBackbone:
    """A truncated or dropped checkpoint's backbone: the blocks of ``spec.dropped`` skipped
    (``TappedBackbone.dropped``, laya depth --drop), the model cut after its last tap when ``spec.cut``
    (``TappedBackbone.truncated``, laya depth --truncate), then the weights the checkpoint kept loaded into what
    is left. The checkpoint's SHA-256 is of those kept weights (``checkpoint_extras`` hashes the reshaped model)."""
    spec, source = backbone.spec, backbone.weights_source
    small = backbone.dropped(spec.dropped) if spec.dropped else backbone
    small = small.truncated(len(small.layer_names)) if spec.cut else small
    small.spec, small.weights_source = spec, source
    if state_dict is not None:
        load_state(small.model, state_dict, name)
    return small


# --------------------------------------------------------------------------- checkpoint glue


def checkpoint_weights(backbone: TappedBackbone, spec: BackboneSpec, weights_file: str | None) -> dict | None:
    """The backbone weights the checkpoint stores: none for a frozen pretrained hub backbone (loaded
    by name, checked by SHA-256) or a .pt2 program (stored whole); the state dict otherwise."""
    if spec.name.startswith("pt2:") or (
        spec.pretrained and not spec.finetune and not weights_file and not spec.reshaped
    ):
        return None  # a cut or dropped backbone (laya depth --truncate/--drop) always stores what it kept
    return {k: v.detach().cpu() for k, v in backbone.model.state_dict().items()}


def checkpoint_extras(backbone: TappedBackbone, spec: BackboneSpec, weights_file: str | None) -> dict:
    """Where the backbone weights came from, their SHA-256, and a .pt2 program's bytes."""
    source = backbone.weights_source
    if weights_file:
        path = Path(weights_file).expanduser()
        source = f"file {path.resolve()}" + (f" (sha256 {file_sha256(path)})" if path.is_file() else "")
    if spec.finetune:
        source += ", fine-tuned end to end"
    extras = {
        "source": source,
        "sha256": weights_sha256(backbone.model.state_dict()),
        "formats": list(backbone.tap_formats),
    }
    declared = getattr(backbone.model, "laya_declared_pool", None)
    if declared is not None and spec.pool == declared[0]:
        extras["pool_declared_by"] = declared[1]  # --pool auto took the model's own pooling
    if initialised := getattr(backbone.model, "laya_initialised_weights", None):
        extras["initialised"] = list(initialised)  # weights the files lacked, initialised at load (seeded)
    if frames := getattr(backbone.model, "laya_still_clip", None):
        extras["still_clip_frames"] = int(frames)  # a video model fed each image repeated over its frames
    program = getattr(backbone.model, "laya_program", None)
    if program is not None:
        extras["program"] = torch.frombuffer(bytearray(program), dtype=torch.uint8)
    return extras


def _recorded_input(section: dict) -> InputConfig | TextInput | None:
    rec = section.get("input")
    if not rec:
        return None
    if rec.get("kind") == "tokens":
        return TextInput(**{k: v for k, v in rec.items() if k != "kind"})
    return InputConfig(
        int(rec["channels"]),
        tuple(rec["size"]) or None,  # type: ignore[arg-type]
        tuple(float(v) for v in rec["mean"]),
        tuple(float(v) for v in rec["std"]),
    )


def _same_input(adapter, cfg: InputConfig | TextInput) -> bool:
    if isinstance(cfg, TextInput) or not isinstance(adapter, InputAdapter):
        return adapter.record() == make_adapter(cfg).record()
    return (
        adapter.channels == cfg.channels
        and tuple(adapter.size or ()) == tuple(cfg.size or ())
        and adapter.mean.flatten().tolist() == list(cfg.mean)
        and adapter.std.flatten().tolist() == list(cfg.std)
    )


def backbone_from_checkpoint(section: dict, model: nn.Module | None = None) -> TappedBackbone:
    """Rebuild a checkpoint's backbone; refuses weights whose SHA-256 differs from the recorded one.

    ``model``: a module of the user's own class (a ``user:`` backbone, which no name builds) to
    load the stored weights into. The input the backbone was trained with (``input``, as recorded)
    wins over the family's default: a model attached in Python was fed the user's tensors as they were.
    """
    spec = BackboneSpec.from_dict(section["spec"])
    recorded = _recorded_input(section)
    if model is not None:
        stored = section.get("weights")
        if stored is None:
            raise LayaError("this checkpoint stores no backbone weights to load into the given backbone")
        if not spec.reshaped:
            load_state(model, stored, type(model).__name__)
        check_sha256(stored, section.get("sha256"), "the stored weights")
        cfg = recorded or InputConfig(spec.in_channels, None, (0.0,), (1.0,))
        backbone = tap_model(model, cfg, spec, example_shape=(spec.in_channels, *spec.image_size))
        backbone.weights_source = section.get("source", "")
        if spec.reshaped:  # the given module is whole; the checkpoint stores it cut / without its dropped layers
            backbone = reshaped_backbone(backbone, stored, type(model).__name__)
        return backbone
    program = section.get("program")
    if program is not None:
        program = program.numpy().tobytes()
    stored = section.get("weights")
    fetch = replace(spec, pretrained=spec.pretrained and stored is None)  # stored weights: no hub fetch
    backbone = build_backbone(fetch, stored, program=program, expect_sha256=section.get("sha256"))
    backbone.spec.pretrained = spec.pretrained
    if not section["spec"].get("formats") and spec.pool == "mean":
        # checkpoints from before declared tap formats averaged every token, prefix tokens included
        backbone.layouts = Layouts(backbone.layouts.spatial, 0)
    backbone.weights_source = section.get("source", backbone.weights_source)
    if recorded is not None and not _same_input(backbone.adapter, recorded):
        backbone.adapter = make_adapter(recorded)  # text: the tokenizer the head was trained with
        backbone.input_cfg = recorded
    return backbone
