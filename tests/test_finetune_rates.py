"""Fine-tuning (docs/usage.md#fine-tuning): the new head learns at --lr, a backbone from trained weights at its own
--backbone-lr (default --lr / 10) warmed up over the first epoch; a backbone from random initialisation at --lr."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import assert_user_error, invoke, make_backbone, make_image_folder
from safetensors.torch import save_file

from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.heads import build_head
from laya_cli.model.laya_model import EndToEnd
from laya_cli.runtime.errors import LayaError
from laya_cli.training.defaults import resolved_backbone_lr
from laya_cli.training.loop import _warm_up, make_optimizer
from laya_cli.training.settings import TrainingSettings

HERE = Path(__file__).resolve()
TINY = f"{HERE.parent / 'test_user_models.py'}:build_tiny_net"


def end_to_end() -> EndToEnd:
    backbone = make_backbone("mlp", 8)
    dims = backbone.dims(torch.zeros(2, 1, 8, 8))
    return EndToEnd(backbone, build_head("laya", dims, 3))


def test_the_head_and_the_backbone_are_two_groups_at_their_rates():
    model = end_to_end()
    cfg = TrainingSettings(lr=3e-4, backbone_lr=2e-5, backbone_warmup=True)
    opt = make_optimizer(model, cfg, n_batches=4)
    groups = {g["name"]: g for g in opt.param_groups}
    assert set(groups) == {"head", "backbone"}
    assert groups["head"]["lr"] == pytest.approx(3e-4)
    assert {id(p) for p in groups["backbone"]["params"]} == {id(p) for p in model.backbone.parameters()}
    assert {id(p) for p in groups["head"]["params"]} == {id(p) for p in model.head.parameters()}
    seen = [groups["backbone"]["lr"]]
    for _ in range(6):  # linear warm-up over the 4 batches of the first epoch, then the rate itself
        _warm_up(opt)
        seen.append(groups["backbone"]["lr"])
    assert seen == pytest.approx([2e-5 * k / 4 for k in (1, 2, 3, 4)] + [2e-5] * 3)
    assert groups["head"]["lr"] == pytest.approx(3e-4)  # the head never warms up


def test_one_group_where_both_learn_at_one_rate_and_for_a_bare_head():
    assert len(make_optimizer(end_to_end(), TrainingSettings(lr=1e-3, backbone_lr=1e-3), 4).param_groups) == 1
    head = end_to_end().head
    assert len(make_optimizer(head, TrainingSettings(backbone_lr=1e-5, backbone_warmup=True), 4).param_groups) == 1


def test_the_default_backbone_rate_follows_where_its_weights_come_from():
    cfg = TrainingSettings(lr=3e-4)
    trained = resolved_backbone_lr(cfg, finetune=True, starts_trained=True)
    assert trained.backbone_lr == pytest.approx(3e-5) and trained.backbone_warmup
    random = resolved_backbone_lr(cfg, finetune=True, starts_trained=False)
    assert random.backbone_lr == pytest.approx(3e-4) and not random.backbone_warmup
    given = resolved_backbone_lr(TrainingSettings(lr=3e-4, backbone_lr=2e-5), finetune=True, starts_trained=True)
    assert given.backbone_lr == pytest.approx(2e-5) and given.backbone_warmup
    own = resolved_backbone_lr(TrainingSettings(lr=3e-4, backbone_lr=1e-5), finetune=True, starts_trained=False)
    assert own.backbone_lr == pytest.approx(1e-5) and own.backbone_warmup  # given below --lr: warmed up
    assert resolved_backbone_lr(cfg, finetune=False, starts_trained=True).backbone_lr is None
    with pytest.raises(LayaError, match="--backbone-lr"):
        resolved_backbone_lr(TrainingSettings(backbone_lr=1e-5), finetune=False, starts_trained=True)


def test_a_fine_tuned_checkpoint_records_both_rates(tmp_path):
    from test_user_models import build_tiny_net

    folder = make_image_folder(tmp_path / "shapes", per_class=6, size=16)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in build_tiny_net().state_dict().items()}, str(weights))
    common = ("--arch", TINY, "--weights", weights, "--dataset", f"folder:{folder}", "--image-size", "16")
    out = tmp_path / "ft.pt"
    res = invoke("train", *common, "--finetune", "--epochs", "1", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    config = read_checkpoint(out)["train_config"]
    assert config["lr"] == pytest.approx(3e-4) and config["backbone_lr"] == pytest.approx(3e-5)
    assert config["backbone_warmup"] is True
    assert_user_error(
        invoke("train", *common, "--frozen", "--backbone-lr", "1e-5", "--out", tmp_path / "f.pt", "-q"),
        "--backbone-lr",
        "--finetune",
    )


def test_tiny_images_upscaled_for_a_model_from_scratch_are_warned_with_a_size_that_fits():
    from laya_cli.backbones.build import RANDOM_START, fitting_side, upscale_warning

    assert [fitting_side(s) for s in (8, 28, 32, 33, 96)] == [32, 32, 32, 64, 96]
    line = upscale_warning((28, 28), (224, 224), RANDOM_START)
    assert "28 px" in line and "224 px" in line and "--input-size 32" in line
    assert upscale_warning((28, 28), (224, 224), "timm pretrained resnet18") is None  # pretrained: its own size
    assert upscale_warning((64, 64), (224, 224), RANDOM_START) is None  # 3.5×: not a lot
    assert upscale_warning((28, 28), None, RANDOM_START) is None
