"""Hub backbones are pretrained by default when frozen; offline without the weights is one line;
warm hub caches (HF_HOME, TORCH_HOME) and hub files given as --weights work offline; the
checkpoint records the weights' source and SHA-256 and audit/export refuse weights that differ."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_user_error, invoke, make_image_folder
from safetensors.torch import save_file

from laya_cli import backbones as bb
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.integrity import with_digest

TIMM = "timm:test_resnet"  # timm's own tiny test model; its hub weights: timm/test_resnet.r160_in1k
HUB_ID = "timm/test_resnet.r160_in1k"


@pytest.fixture()
def empty_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYA_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path


@pytest.fixture()
def on_folder(tmp_path):
    """The options that train on a small folder of drawn shapes, resized to the hub models' input at 32×32."""
    folder = make_image_folder(tmp_path / "shapes", per_class=6, size=16)
    return ("--dataset", f"folder:{folder}", "--input-size", "32")


def fake_hf_cache(hf_home, repo_id: str, state: dict) -> None:
    """What huggingface_hub leaves after a download: refs/main -> snapshots/<rev>/model.safetensors."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    base = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(rev)
    (base / "snapshots" / rev).mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(base / "snapshots" / rev / "model.safetensors"))


def random_state(seed: int) -> dict:
    import timm

    torch.manual_seed(seed)
    return timm.create_model("test_resnet", pretrained=False).state_dict()  # with its 1000-class head


def test_hub_backbones_start_from_their_pretrained_weights_frozen_or_fine_tuned():
    assert bb.default_pretrained("vit_base", finetune=False)
    assert bb.default_pretrained("timm:resnet18", finetune=False)
    assert bb.default_pretrained("torchvision:resnet18", finetune=False)
    assert bb.default_pretrained("timm:resnet18", finetune=True)  # fine-tuning starts from the weights named
    assert not bb.default_pretrained("timm:resnet18", finetune=False, weights="w.safetensors")
    assert not bb.default_pretrained("mlp", finetune=False)


@pytest.mark.parametrize("backbone", ["vit_base", TIMM, "torchvision:mobilenet_v3_small"])
def test_offline_without_the_weights_is_one_line(empty_caches, on_folder, backbone):
    out = empty_caches / "m.pt"
    res = invoke("train", "--backbone", backbone, *on_folder, "--out", out)
    assert_user_error(
        res, "pretrained weights for", "--weights FILE", "HF_HOME", "HF_HUB_OFFLINE", "TORCH_HOME", "--no-pretrained"
    )
    assert not out.exists()


def test_warm_hf_cache_then_weights_that_changed_are_refused(empty_caches, on_folder):
    fake_hf_cache(empty_caches / "hf", HUB_ID, random_state(1))
    out = empty_caches / "m.pt"
    res = invoke("train", "--backbone", TIMM, *on_folder, "--epochs", "2", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    ckpt = read_checkpoint(out)
    assert ckpt["backbone"]["spec"]["pretrained"] and ckpt["backbone"]["weights"] is None  # loaded by name
    assert ckpt["backbone"]["source"] == f"timm pretrained {HUB_ID}"
    src = random_state(1)
    b = bb.build_backbone(bb.BackboneSpec(TIMM, in_channels=3, image_size=(16, 16), input_size=32, pretrained=True))
    torch.testing.assert_close(b.model.conv1[0].weight, src["conv1.0.weight"])  # the cached file was used
    assert ckpt["backbone"]["sha256"] == bb.weights_sha256(b.model.state_dict())
    assert invoke("audit", out, "--compare", "ig", "--steps", "4", "-q").exit_code == 0

    fake_hf_cache(empty_caches / "hf", HUB_ID, random_state(2))  # the hub's weights changed since training
    assert_user_error(invoke("audit", out, "-q"), "weights differ", "sha256", "refusing")
    assert_user_error(invoke("export", out, "--out", empty_caches / "exp", "-q"), "weights differ")
    assert not (empty_caches / "exp").exists()


def test_warm_torch_home_for_torchvision(empty_caches, on_folder):
    import torchvision

    weights = torchvision.models.get_model_weights("mobilenet_v3_small").DEFAULT
    target = empty_caches / "torch" / "hub" / "checkpoints" / weights.url.rsplit("/", 1)[-1]
    target.parent.mkdir(parents=True)
    torch.manual_seed(3)
    src = torchvision.models.mobilenet_v3_small().state_dict()
    torch.save(src, target)
    out = empty_caches / "m.pt"
    res = invoke(
        "train", "--backbone", "torchvision:mobilenet_v3_small", *on_folder, "--epochs", "1", "--out", out, "-q"
    )
    assert res.exit_code == 0, res.output
    ckpt = read_checkpoint(out)
    assert ckpt["backbone"]["source"].startswith("torchvision pretrained MobileNet_V3_Small_Weights.IMAGENET1K_V1")
    assert ckpt["backbone"]["weights"] is None and len(ckpt["backbone"]["sha256"]) == 64


@pytest.mark.parametrize("filename", [pytest.param("model.safetensors", marks=pytest.mark.slow), "pytorch_model.bin"])
def test_a_hub_weights_file_given_as_weights(empty_caches, on_folder, filename):
    src = random_state(4)
    path = empty_caches / filename
    if filename.endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in src.items()}, str(path))
    else:
        torch.save(src, path)
    out = empty_caches / "m.pt"
    res = invoke("train", "--backbone", TIMM, "--weights", path, *on_folder, "--epochs", "1", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    ckpt = read_checkpoint(out)
    assert not ckpt["backbone"]["spec"]["pretrained"]  # --weights, not the hub
    torch.testing.assert_close(ckpt["backbone"]["weights"]["conv1.0.weight"], src["conv1.0.weight"])
    assert str(path) in ckpt["backbone"]["source"] and "sha256" in ckpt["backbone"]["source"]
    info = json.loads(invoke("info", out, "--json").output)
    assert info["backbone"]["weights_source"] == ckpt["backbone"]["source"]


def test_tampered_stored_weights_are_refused(tmp_path, digits_ckpt):
    ckpt = torch.load(digits_ckpt, weights_only=True)
    ckpt_path = tmp_path / "m.pt"
    ckpt["backbone"]["weights"]["blocks.0.0.weight"] += 1.0
    torch.save(with_digest(ckpt), ckpt_path)  # re-sealed: what the weights' own SHA-256 catches
    assert_user_error(invoke("audit", ckpt_path, "-q"), "weights differ", "stored weights")
