"""Transformers vision models laid out unlike a square-image ViT: video models fed each image as a still clip
(VideoMAE, ViViT, TimeSformer), a frame-batched video tower refused (X-CLIP), a non-square ``image_size`` (MGP-STR,
whose blocks an ``nn.Sequential`` holds), a features-only timm backbone that cannot return hidden states
(EdgeTAM), a forward that draws at random (ViT-MAE) refused — each on a tiny model built from its config."""

from __future__ import annotations

import json

import pytest
import torch

from laya_cli.backbones import BackboneSpec
from laya_cli.backbones.hf import HFFamily, _prefix_tokens, _probe_inputs, image_geometry, layer_taps, tapped_model
from laya_cli.runtime.errors import LayaError

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _tapped(config):
    torch.manual_seed(0)
    return tapped_model(transformers.AutoModel.from_config(config), config.model_type).eval()


def _states(model, x):
    with torch.no_grad():
        return model(x, output_hidden_states=True).hidden_states


def test_a_video_model_is_fed_each_image_as_a_still_clip():
    config = transformers.VideoMAEConfig(image_size=32, patch_size=8, num_frames=4, tubelet_size=2, **SMALL)
    model = _tapped(config)
    assert model.laya_still_clip == 4
    images = _probe_inputs(model)["pixel_values"]
    assert images.ndim == 4  # laya's probe batch stays images
    clip = images.unsqueeze(1).repeat(1, 4, 1, 1, 1)
    assert torch.equal(_states(model, images)[-1], _states(model, clip)[-1])  # a clip passes as it is
    assert len(layer_taps(model)) == 2
    assert _prefix_tokens(model) == 0  # 2 tubelets × 16 patches, no class token


def test_a_still_clip_s_class_token_is_its_prefix():
    config = transformers.VivitConfig(image_size=32, tubelet_size=[2, 8, 8], num_frames=4, **SMALL)
    model = _tapped(config)
    assert model.laya_still_clip == 4 and _prefix_tokens(model) == 1
    assert HFFamily().default_pool(model) == "cls"


def test_a_video_tower_that_batches_frames_is_refused_in_one_line():
    vision = dict(image_size=32, patch_size=8, num_frames=4, **SMALL)
    config = transformers.XCLIPConfig(
        vision_config=vision, text_config=dict(vocab_size=64, **SMALL), mit_hidden_size=32
    )
    with pytest.raises(LayaError, match="num_frames=4 but runs neither on images") as e:
        _tapped(config)
    assert "\n" not in str(e.value)


def _mgp_str(tmp_path, size=(32, 64)):
    config = transformers.MgpstrConfig(image_size=list(size), patch_size=8, max_token_length=8, **_mgp_small())
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path)
    return tmp_path


def _mgp_small():
    return dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, mlp_ratio=2.0)


def test_a_non_square_image_size_is_honoured(tmp_path):
    folder = _mgp_str(tmp_path)
    assert image_geometry(json.loads((folder / "config.json").read_text())) == (3, (32, 64))
    family = HFFamily()
    model, cfg = family.build(str(folder), BackboneSpec(f"hf:{folder}"))
    assert tuple(cfg.size) == (32, 64)
    assert family.input_side(str(folder), BackboneSpec(f"hf:{folder}")) == 64  # decoded at the longer side
    assert _probe_inputs(model)["pixel_values"].shape[-2:] == (32, 64)
    taps = layer_taps(model)  # its blocks: an nn.Sequential the encoder calls one by one
    assert taps == ["encoder.blocks.0", "encoder.blocks.1", "encoder.blocks.2"]
    assert _prefix_tokens(model) == 1  # 4 × 8 patches after its class token
    cut = family.truncate(model, taps, 2)
    assert len(cut.encoder.blocks) == 2 and isinstance(cut.encoder.blocks, torch.nn.Sequential)


def test_input_size_on_a_non_square_model_is_refused(tmp_path):
    folder = _mgp_str(tmp_path)
    with pytest.raises(LayaError, match=r"takes 32×64 images .*--input-size sets a square side"):
        HFFamily().build(str(folder), BackboneSpec(f"hf:{folder}", input_size=64))


def test_a_model_that_draws_at_random_is_refused():
    config = transformers.ViTMAEConfig(image_size=32, patch_size=8, mask_ratio=0.0, **SMALL)
    with pytest.raises(LayaError, match="other hidden states on each call"):
        layer_taps(_tapped(config))


def test_a_timm_backbone_without_hidden_states_is_tapped_at_its_declared_stages():
    pytest.importorskip("timm")
    backbone = transformers.AutoConfig.for_model("edgetam_vision_model").to_dict()["backbone_config"]
    backbone["architecture"] = "repvit_m1"  # the default config misspells it (and builds a ResNet-50)
    config = transformers.AutoConfig.for_model(
        "edgetam_vision_model", backbone_config=backbone, backbone_channel_list=[384, 192, 96, 48], fpn_hidden_size=32
    )
    model = _tapped(config)
    with pytest.raises(ValueError, match="output_hidden_states"):  # what its forward says when asked for them
        model(_probe_inputs(model)["pixel_values"], output_hidden_states=True)
    taps = layer_taps(model)
    assert taps == [f"backbone.timm_model.stages_{i}" for i in range(4)]
    assert HFFamily().layouts(model).prefix == 0


def _train(tmp_path, config, *extra):
    from typer.testing import CliRunner

    from benchmarks.synthetic import make_image_folder
    from laya_cli.cli.group import app

    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path / "model")
    make_image_folder(tmp_path / "images", per_class=4, size=48)
    args = ["train", "--backbone", f"hf:{tmp_path / 'model'}", "--dataset", f"folder:{tmp_path / 'images'}"]
    args += ["--epochs", "1", "--batch-size", "8", "--out", str(tmp_path / "m.pt"), "--device", "cpu", "-q", *extra]
    return CliRunner().invoke(app, args)


def test_a_video_model_trains_on_an_image_folder_and_its_checkpoint_says_still_clips(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    config = transformers.VideoMAEConfig(image_size=32, patch_size=8, num_frames=4, tubelet_size=2, **SMALL)
    res = _train(tmp_path, config, "--input-size", "32")
    assert res.exit_code == 0, res.output
    backbone = torch.load(tmp_path / "m.pt", weights_only=True)["backbone"]
    assert backbone["still_clip_frames"] == 4


def test_a_non_square_model_trains_at_its_own_height_and_width(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    config = transformers.MgpstrConfig(image_size=[32, 64], patch_size=8, max_token_length=8, **_mgp_small())
    res = _train(tmp_path, config)
    assert res.exit_code == 0, res.output
    backbone = torch.load(tmp_path / "m.pt", weights_only=True)["backbone"]
    assert backbone["input"]["size"] == [32, 64]
    res = _train(tmp_path / "again", config, "--input-size", "32")
    assert res.exit_code == 2 and "--input-size sets a square side" in res.output


@pytest.mark.slow
def test_the_sweep_passes_the_vision_types_these_rules_opened(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    passing = ["videomae", "vivit", "timesformer", "mgp-str", "uvdoc", "depth_pro", "lw_detr", "edgetam"]
    refused = {"xclip": "num_frames", "vit_mae": "other hidden states on each call"}
    out = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "benchmarks.zoo", "--sweep", "--source", "hf", "--all", "--only",
           ",".join([*passing, *refused]), "--json", str(out), "--timeout", "240"]  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=1500)
    assert out.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {r["model_type"]: r for r in json.loads(out.read_text())}
    assert {t: rows[t]["status"] for t in passing} == dict.fromkeys(passing, "pass")
    for t, why in refused.items():
        assert rows[t]["status"] == "refused" and rows[t]["stage"] == "train" and why in rows[t]["reason"]
