"""The backbone zoo: one conformance check over many timm and torchvision architectures.

    python -m benchmarks.zoo [--only NAME,NAME] [--no-pipeline] [--markdown FILE]

For every architecture (random weights: nothing is downloaded), in the spirit of timm's own
``tests/test_models.py``:

1. default taps: at least 3, in the order the forward runs them;
2. every r_i is B×d_i with d_i the stage's channel / embedding width — timm: the model's own
   ``feature_info``; torchvision: the widths of the architecture's definition (``widths`` below);
3. timm only: r_i equals the same stage pooled from timm's own ``forward_intermediates``
   (NCHW, prefix tokens split off), so the declared layout (NCHW / NHWC / NLC+P) is right;
4. the pipeline: ``laya train`` (frozen) → ``laya audit`` → ``laya export`` on a small
   generated image folder, at a small input size where the model allows one.

Prints a table (model, family, taps, widths, format, pass, seconds) — the one in
docs/backbones.md. ``tests/test_zoo.py`` runs the same checks: a representative few by
default, all of them with ``-m slow``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
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

    spec = bb.BackboneSpec(entry.name, in_channels=3, image_size=(entry.size, entry.size), input_size=entry.size)
    return bb.build_backbone(spec).eval()


def expected_widths(entry: ZooModel, backbone) -> list[int]:
    """timm: the model's own feature_info; torchvision: the architecture's stage widths."""
    if entry.name.startswith("timm:"):
        chans = {f["module"]: f["num_chs"] for f in backbone.model.feature_info}
        return [chans[t] for t in backbone.layer_names]
    return list(entry.widths)


def check_structure(entry: ZooModel, backbone, result: ZooResult | None = None) -> None:
    """Taps (≥ 3, in depth order), widths, and for timm agreement with forward_intermediates."""
    from laya_cli.backbones.taps import trace_calls

    names = backbone.layer_names
    x = torch.rand(2, 3, entry.size, entry.size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        feats = backbone(x)
    if result is not None:
        result.taps, result.widths, result.formats = names, [f.shape[-1] for f in feats], backbone.tap_formats
    assert len(names) >= 3, f"{entry.name}: only {len(names)} default taps: {names}"
    with torch.no_grad():
        calls = trace_calls(backbone.model, backbone.adapter(x), stop_when=names, only=set(names))
    starts = [calls[n][0].start for n in names]
    assert starts == sorted(starts), f"{entry.name}: taps not in depth order: {names}"
    want = expected_widths(entry, backbone)
    assert [tuple(f.shape) for f in feats] == [(2, d) for d in want], (
        f"{entry.name}: r_i shapes {[tuple(f.shape) for f in feats]}, expected widths {want}"
    )
    if entry.name.startswith("timm:"):
        _check_against_timm(entry, backbone, x, feats)


def _check_against_timm(entry: ZooModel, backbone, x, feats) -> None:
    """Our pooled taps == timm's forward_intermediates for the same stages, pooled by hand."""
    model = backbone.model
    fi = [f["module"] for f in model.feature_info]
    idx = [fi.index(n) for n in backbone.layer_names]
    with torch.no_grad():
        z = backbone.adapter(x)
        inter = model.forward_intermediates(z, indices=idx, intermediates_only=True, stop_early=True)
        prefix = None
        if getattr(model, "num_prefix_tokens", 0):
            pairs = model.forward_intermediates(
                z, indices=idx, intermediates_only=True, stop_early=True, return_prefix_tokens=True
            )
            prefix = [p for _, p in pairs]
    for i, (ours, ref) in enumerate(zip(feats, inter)):
        ref_vec = prefix[i][:, 0] if backbone.pool == "cls" and prefix is not None else ref.mean(dim=(2, 3))
        assert torch.allclose(ours, ref_vec, rtol=1e-4, atol=1e-5), (
            f"{entry.name}: tap {backbone.layer_names[i]} ({backbone.tap_formats[i]}) differs from timm's "
            f"forward_intermediates"
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


def main(argv: list[str] | None = None) -> list[ZooResult]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated backbone names (default: the whole zoo)")
    parser.add_argument("--no-pipeline", action="store_true", help="structure checks only (no train/audit/export)")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("LAYA_OFFLINE", "1")
    entries = ZOO
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        entries = [e for e in ZOO if e.name in wanted] or [ZooModel(n, "?", 64) for n in wanted]
    from rich.console import Console
    from rich.table import Table

    from laya_cli.runtime import progress

    progress.set_enabled(False)
    console = Console(width=160)
    results = []
    with tempfile.TemporaryDirectory(prefix="laya-zoo-") as tmp:
        os.environ["LAYA_CACHE_DIR"] = str(Path(tmp) / "cache")
        for entry in entries:
            r = run_one(entry, Path(tmp), pipeline=not args.no_pipeline)
            status = "pass" if r.passed else f"FAIL {r.error[:100]}"
            print(f"{entry.name:42s} {len(r.taps):3d} taps  {r.seconds:6.1f}s  {status}", file=sys.stderr, flush=True)
            results.append(r)
    table = Table(
        title="laya backbone zoo (random weights; "
        + ("structure + train/audit/export)" if not args.no_pipeline else "structure only)")
    )
    for col in ("model", "family", "taps", "widths", "format", "pass", "seconds"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for r in results:
        table.add_row(
            r.model.name,
            r.model.family,
            str(len(r.taps)),
            _widths_text(r.widths),
            _format_text(r.formats),
            "yes" if r.passed else f"no: {r.error[:60]}",
            f"{r.seconds:.1f}",
        )
    console.print(table)
    n_ok = sum(r.passed for r in results)
    console.print(
        f"{n_ok} of {len(results)} architectures pass "
        f"({sum(e.name.startswith('timm:') for e in entries)} timm, "
        f"{sum(e.name.startswith('torchvision:') for e in entries)} torchvision)."
    )
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, not args.no_pipeline))
    return results


if __name__ == "__main__":
    results = main()
    sys.exit(0 if all(r.passed for r in results) else 1)
