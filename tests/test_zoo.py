"""The backbone conformance suite (timm's tests/test_models.py in spirit): every architecture of
benchmarks/zoo.py gets the same checks — default taps (≥ 3, depth order), r_i widths against the
model's own feature_info or the architecture's known widths, agreement with timm's
forward_intermediates, and frozen train → audit → export. A representative few by default;
all of them with ``-m slow`` (and ``python -m benchmarks.zoo`` for the table)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root holds benchmarks/

from benchmarks.zoo import TIMM_ZOO, TORCHVISION_ZOO, ZOO, build, check_pipeline, check_structure  # noqa: E402

STRUCTURE_FAST = {
    "timm:swin_tiny_patch4_window7_224",
    "timm:deit_tiny_distilled_patch16_224",
    "torchvision:resnet18",
    # stages read from forward_intermediates: a container that never runs, a module that does not exist, blocks
    # without the class token the model counts
    "timm:coat_tiny",
    "timm:hrnet_w18_small",
    "timm:tresnet_m",
    "timm:xcit_nano_12_p8_224",
}
PIPELINE_FAST = {
    "timm:resnet18",  # BatchNorm (the fingerprint bug), timm feature_info taps, the CLI end to end
    "timm:hrnet_w18_small",  # stages read from forward_intermediates, end to end
}
STAGES_FROM_TIMM = {  # families whose feature_info modules cannot be hooked (issue 24's sweep)
    "CoaT",
    "CrossViT",
    "TNT",
    "TResNet",
    "SAM-ViT",
    "VOLO",
    "HRNet",
    "MobileNetV5",
    "MViTv2",
    "Twins",
    "XCiT",
    "CaiT",
    "ConViT",
}


def params(entries, fast):
    return [pytest.param(e, id=e.name, marks=() if fast(e) else pytest.mark.slow) for e in entries]


@pytest.mark.parametrize("entry", params(ZOO, lambda e: e.name in STRUCTURE_FAST))
def test_default_taps_widths_and_layouts(entry):
    b = build(entry)
    check_structure(entry, b)
    if entry.name.startswith("timm:"):  # every declared stage: as modules, or read from forward_intermediates
        stages = entry.family in STAGES_FROM_TIMM
        assert (b.engine_kind == "intermediates") == stages
        assert all(n.startswith("feature_info.") for n in b.layer_names) == stages


@pytest.mark.parametrize("entry", params(ZOO, lambda e: e.name in PIPELINE_FAST))
def test_frozen_train_audit_export(entry, tmp_path_factory):
    check_pipeline(entry, tmp_path_factory.getbasetemp())


def test_the_zoo_spans_the_families():
    timm_families = {e.family for e in TIMM_ZOO}
    for needed in (
        "ResNet",
        "ResNet-D",
        "ResNetV2",
        "ConvNeXt",
        "EfficientNet",
        "MobileNetV3",
        "RegNet",
        "DenseNet",
        "VGG",
        "ViT",
        "Swin",
        "MaxViT",
        "CoAtNet",
        "MLP-Mixer",
        "hybrid ResNet+ViT",
    ):
        assert needed in timm_families
    assert {"BEiT", "EVA-02"} & timm_families and any(f.startswith("DeiT") for f in timm_families)
    assert STAGES_FROM_TIMM <= timm_families
    assert len(TIMM_ZOO) >= 15 and len(TORCHVISION_ZOO) >= 10
    tv_families = {e.family for e in TORCHVISION_ZOO}
    for needed in (
        "ResNet",
        "ResNeXt",
        "VGG-BN",
        "MobileNetV2",
        "MobileNetV3",
        "EfficientNet",
        "RegNet",
        "ConvNeXt",
        "DenseNet",
        "ViT",
        "Swin",
    ):
        assert needed in tv_families
