"""The backbone zoo: one conformance check over many timm and torchvision architectures.

    python -m benchmarks.zoo [--only NAME,NAME] [--no-pipeline] [--markdown FILE]
    python -m benchmarks.zoo --sweep [--source timm,torchvision,hf] [--only NAME,NAME] [--markdown FILE]

For every architecture (random weights: nothing is downloaded), in the spirit of timm's own
``tests/test_models.py``:

1. default taps: at least 3, in the order the forward runs them;
2. every r_i is B×d_i with d_i the stage's channel / embedding width — timm: the model's own
   ``feature_info``; torchvision: the widths of the architecture's definition (``widths`` below);
3. timm only: the taps are every stage ``feature_info`` declares (its modules, or ``feature_info.<i>``
   read from ``forward_intermediates``), and r_i equals the same stage pooled from timm's own
   ``forward_intermediates`` (the mean over positions, and the class token where timm returns
   prefix tokens), so the declared layout (NCHW / NHWC / NLC+P) is right;
4. the pipeline: ``laya train`` (frozen) → ``laya audit`` → ``laya export`` on a small
   generated image folder, at a small input size where the model allows one.

Prints a table (model, family, taps, widths, format, pass, seconds) — the one in
docs/backbones.md. ``tests/test_zoo.py`` runs the same checks: a representative few by
default, all of them with ``-m slow``. ``--sweep`` runs checks 1–3 over one small model of
every timm family and every torchvision classifier (``zoo_sweep.py``).
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class ZooModel:
    name: str  # backbone name as given to --backbone
    family: str  # architecture family, for the table
    size: int  # input side the check uses (small where the model allows)
    widths: tuple[int, ...] = ()  # torchvision: the stage widths of the architecture's definition


TIMM_ZOO = [
    ZooModel("timm:resnet18", "ResNet", 32),
    ZooModel("timm:resnet26d", "ResNet-D", 32),
    ZooModel("timm:resnetv2_50", "ResNetV2", 32),
    ZooModel("timm:convnext_atto", "ConvNeXt", 32),
    ZooModel("timm:efficientnet_b0", "EfficientNet", 32),
    ZooModel("timm:mobilenetv3_small_050", "MobileNetV3", 32),
    ZooModel("timm:regnetx_002", "RegNet", 32),
    ZooModel("timm:densenet121", "DenseNet", 32),
    ZooModel("timm:vgg11_bn", "VGG", 32),
    ZooModel("timm:vit_tiny_patch16_224", "ViT", 32),
    ZooModel("timm:deit_tiny_distilled_patch16_224", "DeiT (distilled)", 32),
    ZooModel("timm:eva02_tiny_patch14_224", "EVA-02", 28),
    ZooModel("timm:beit_base_patch16_224", "BEiT", 32),
    ZooModel("timm:swin_tiny_patch4_window7_224", "Swin", 64),
    ZooModel("timm:maxvit_nano_rw_256", "MaxViT", 64),
    ZooModel("timm:coatnet_nano_rw_224", "CoAtNet", 64),
    ZooModel("timm:mixer_s16_224", "MLP-Mixer", 32),
    ZooModel("timm:vit_tiny_r_s16_p8_224", "hybrid ResNet+ViT", 64),
    ZooModel("timm:mobilevit_xxs", "MobileViT (hybrid)", 64),
    # feature_info modules that are not what runs, or not laid out as declared: read from forward_intermediates
    ZooModel("timm:coat_tiny", "CoaT", 64),  # serial_blocks1 never runs; parallel_blocks computes 3 stages
    ZooModel("timm:crossvit_tiny_240", "CrossViT", 240),  # blocks.0 computes both branches' stages
    ZooModel("timm:tnt_s_patch16_224", "TNT", 64),  # blocks return pixel tokens first
    ZooModel("timm:tresnet_m", "TResNet", 64),  # the stem is the whole model ('')
    ZooModel("timm:samvit_base_patch16_224", "SAM-ViT", 64),  # B×H×W×C blocks
    ZooModel("timm:volo_d1_224", "VOLO", 64),  # B×H×W×C stages
    ZooModel("timm:hrnet_w18_small", "HRNet", 64),  # stem: no such module; stages are branch lists
    ZooModel("timm:mobilenetv5_base", "MobileNetV5", 64),  # bn1: no such module
    ZooModel("timm:mvitv2_tiny", "MViTv2", 64),  # block.N: no such module (stages.N)
    ZooModel("timm:twins_svt_small", "Twins", 64),  # block.N: no such module (blocks.N never runs)
    ZooModel("timm:xcit_nano_12_p8_224", "XCiT", 64),  # blocks carry no class token though the model has one
    ZooModel("timm:cait_xxs24_224", "CaiT", 64),  # the same
    ZooModel("timm:convit_tiny", "ConViT", 64),  # the same for its first 10 blocks
]
TORCHVISION_ZOO = [
    ZooModel("torchvision:resnet18", "ResNet", 32, (64, 128, 256, 512)),
    ZooModel("torchvision:resnext50_32x4d", "ResNeXt", 32, (256, 512, 1024, 2048)),
    ZooModel("torchvision:vgg11_bn", "VGG-BN", 32, (64, 128, 256, 512, 512, 512)),
    ZooModel("torchvision:mobilenet_v2", "MobileNetV2", 32, (16, 24, 32, 96, 1280)),
    ZooModel("torchvision:mobilenet_v3_small", "MobileNetV3", 32, (16, 16, 24, 48, 576)),
    ZooModel("torchvision:efficientnet_b0", "EfficientNet", 32, (16, 24, 40, 112, 1280)),
    ZooModel("torchvision:regnet_x_400mf", "RegNet", 32, (32, 64, 160, 400)),
    ZooModel("torchvision:convnext_tiny", "ConvNeXt", 32, (96, 192, 384, 768)),
    ZooModel("torchvision:densenet121", "DenseNet", 32, (64, 256, 512, 1024, 1024)),
    ZooModel("torchvision:vit_b_16", "ViT", 32, (768,) * 12),
    ZooModel("torchvision:swin_t", "Swin", 64, (96, 192, 384, 768)),
    ZooModel("torchvision:shufflenet_v2_x0_5", "ShuffleNetV2", 64, (48, 96, 192, 1024)),
    ZooModel("torchvision:maxvit_t", "MaxViT", 224, (64, 128, 256, 512)),
]
ZOO = TIMM_ZOO + TORCHVISION_ZOO


@dataclass
class ZooResult:
    model: ZooModel
    taps: list[str] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    passed: bool = False
    seconds: float = 0.0
    error: str = ""
    engine: str = ""  # how the taps are read: hooks, fx, intermediates


# --------------------------------------------------------------------------- the checks


def make_shapes_folder(root: Path, size: int, per_class: int = 8, classes=("circle", "square", "cross")) -> Path:
    """A small learnable ImageFolder tree: one shape per class at random places."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            im = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 60, 3)))
            d = ImageDraw.Draw(im)
            x, y = (int(v) for v in rng.integers(1, max(2, size // 2), 2))
            s = int(rng.integers(max(2, size // 4), max(3, size // 2)))
            if c == 0:
                d.ellipse([x, y, x + s, y + s], fill=(230, 200, 40))
            elif c == 1:
                d.rectangle([x, y, x + s, y + s], fill=(230, 200, 40))
            else:
                d.line([x, y, x + s, y + s], fill=(230, 200, 40), width=2)
                d.line([x, y + s, x + s, y], fill=(230, 200, 40), width=2)
            im.save(root / name / f"{i:03d}.png")
    return root


def build(entry: ZooModel):
    from laya_cli import backbones as bb

    # the declared stages are what is checked here (timm's feature_info, torchvision's stage widths); a CNN's residual
    # blocks (--taps blocks, the default) are checked by tests/test_cnn_blocks.py
    spec = bb.BackboneSpec(
        entry.name, in_channels=3, image_size=(entry.size, entry.size), input_size=entry.size, taps="stages"
    )
    return bb.build_backbone(spec).eval()


def expected_widths(entry: ZooModel, backbone) -> list[int]:
    """timm: the model's own feature_info; torchvision: the architecture's stage widths (none known: [])."""
    if entry.name.startswith("timm:"):
        from laya_cli.backbones.stages import feature_info, stage_indices

        chans, index = [f["num_chs"] for f in feature_info(backbone.model)], stage_indices(backbone.model)
        return [chans[index[t]] for t in backbone.layer_names]
    return list(entry.widths)


def check_structure(entry: ZooModel, backbone, result: ZooResult | None = None) -> None:
    """Taps (≥ 3, in depth order), widths, and for timm agreement with forward_intermediates."""
    names = backbone.layer_names
    x = torch.rand(2, 3, entry.size, entry.size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hs = backbone.activations(x)
        feats = [backbone.pool_tap(i, h) for i, h in enumerate(hs)]
    if result is not None:
        result.taps, result.widths, result.formats = names, [f.shape[-1] for f in feats], backbone.tap_formats
        result.engine = backbone.engine_kind
    assert len(names) >= 3, f"{entry.name}: only {len(names)} default taps: {names}"
    if backbone.engine_kind != "intermediates":  # timm's stages come in feature_info's order, checked below
        _check_depth_order(entry, backbone, x)
    want = expected_widths(entry, backbone) or [f.shape[-1] for f in feats]
    assert [tuple(f.shape) for f in feats] == [(2, d) for d in want], (
        f"{entry.name}: r_i shapes {[tuple(f.shape) for f in feats]}, expected widths {want}"
    )
    assert all(torch.isfinite(f).all() for f in feats), f"{entry.name}: r_i not finite"
    if entry.name.startswith("timm:"):
        _check_against_timm(entry, backbone, x, hs, feats)


def _check_depth_order(entry: ZooModel, backbone, x) -> None:
    from laya_cli.backbones.chain import trace_calls

    names = backbone.layer_names
    with torch.no_grad():
        calls = trace_calls(backbone.model, backbone.adapter(x), stop_when=names, only=set(names))
    starts = [calls[n][0].start for n in names]
    assert starts == sorted(starts), f"{entry.name}: taps not in depth order: {names}"


def _check_against_timm(entry: ZooModel, backbone, x, hs, feats) -> None:
    """The taps are the stages feature_info declares (all of them, in its order, as modules or as
    ``feature_info.<i>``), and each r_i is that stage as timm's own forward_intermediates gives it, pooled by
    hand: the mean over positions, and the class token where the pool is ``cls`` and timm returns it."""
    import inspect

    from laya_cli.backbones.stages import feature_info, stage_indices

    model = backbone.model
    index, n = stage_indices(model), len(feature_info(model))
    idx = [index.get(t) for t in backbone.layer_names]
    assert idx == list(range(n)), f"{entry.name}: taps {backbone.layer_names} are not the {n} declared stages"
    params = inspect.signature(model.forward_intermediates).parameters
    options = {"intermediates_only": True, "stop_early": True}
    options.update({"output_fmt": "NCHW"} if "output_fmt" in params else {})
    with_prefix = bool(getattr(model, "num_prefix_tokens", 0)) and "return_prefix_tokens" in params
    with torch.no_grad():
        z = backbone.adapter(x)
        inter = model.forward_intermediates(z, indices=idx, **options)
        prefix = None
        if with_prefix:
            prefix = [p for _, p in model.forward_intermediates(z, indices=idx, return_prefix_tokens=True, **options)]
    for i, (h, r, ref) in enumerate(zip(hs, feats, inter)):
        where = f"{entry.name}: tap {backbone.layer_names[i]} ({backbone.tap_formats[i]})"
        ours = backbone.tap_format(i).pool(h, "mean")
        assert torch.allclose(ours, ref.flatten(2).mean(2), rtol=1e-4, atol=1e-5), (
            f"{where}: its mean over positions differs from timm's forward_intermediates"
        )
        if backbone.pool == "cls" and prefix is not None:
            assert torch.allclose(r, prefix[i][:, 0], rtol=1e-4, atol=1e-5), (
                f"{where}: its class token differs from timm's forward_intermediates"
            )


def check_pipeline(entry: ZooModel, workdir: Path) -> None:
    """Frozen train -> audit -> export through the command line, on a small generated folder."""
    from typer.testing import CliRunner

    from laya_cli.cli.group import app

    data = workdir / f"shapes{entry.size}"
    if not data.exists():
        make_shapes_folder(data, entry.size)
    out = workdir / (entry.name.replace(":", "_") + ".pt")
    runner = CliRunner()
    steps = [
        [
            "train",
            "--backbone",
            entry.name,
            "--no-pretrained",
            "--input-size",
            str(entry.size),
            "--image-size",
            str(entry.size),
            "--dataset",
            f"folder:{data}",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--device",
            "cpu",
            "--out",
            str(out),
            "-q",
        ],
        ["audit", str(out), "--compare", "ig,gradxact", "--steps", "4", "--device", "cpu", "-q"],
        [
            "export",
            str(out),
            "--out",
            str(workdir / (out.stem + "-export")),
            "--no-plots",
            "--strip",
            "0",
            "--device",
            "cpu",
            "-q",
            "--overwrite",
        ],
    ]
    for args in steps:
        res = runner.invoke(app, args)
        assert res.exit_code == 0, f"{entry.name}: laya {args[0]} exited {res.exit_code}: {res.output[-600:]}"


def run_one(entry: ZooModel, workdir: Path, pipeline: bool = True) -> ZooResult:
    result = ZooResult(entry)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            backbone = build(entry)
            check_structure(entry, backbone, result)
            if pipeline:
                check_pipeline(entry, workdir)
        result.passed = True
    except Exception as e:  # a benchmark reports failures, it does not stop
        result.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        if os.environ.get("LAYA_ZOO_TRACEBACK"):
            traceback.print_exc()
    result.seconds = time.perf_counter() - start
    return result


# --------------------------------------------------------------------------- the table


def _widths_text(widths: list[int]) -> str:
    if len(widths) > 4 and len(set(widths)) == 1:
        return f"{widths[0]} ×{len(widths)}"
    return "/".join(map(str, widths))


def _format_text(formats: list[str]) -> str:
    return ", ".join(dict.fromkeys(formats))


def markdown(results: list[ZooResult], pipeline: bool) -> str:
    head = "| model | family | taps | widths | format | pass | seconds |\n|---|---|---|---|---|---|---|\n"
    rows = []
    for r in results:
        taps = f"{len(r.taps)}: {r.taps[0]} … {r.taps[-1]}" if r.taps else "—"
        ok = "yes" if r.passed else f"**no**: {r.error[:120]}"
        rows.append(
            f"| `{r.model.name}` | {r.model.family} | {taps} | {_widths_text(r.widths)} | "
            f"{_format_text(r.formats)} | {ok} | {r.seconds:.1f} |"
        )
    n_ok = sum(r.passed for r in results)
    what = "structure + train/audit/export" if pipeline else "structure only"
    return head + "\n".join(rows) + f"\n\n{n_ok} of {len(results)} architectures pass ({what}).\n"
