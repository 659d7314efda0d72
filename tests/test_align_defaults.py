"""The alignment term a kind of model trains with when the user names none (backbones/defaults.py's table, resolved
by training/defaults.py), resolved once
and recorded in the checkpoint."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_user_error, invoke

from laya_cli.backbones import defaults as kinds
from laya_cli.runtime.errors import LayaError
from laya_cli.training import defaults
from laya_cli.training.defaults import resolved_alignment, resolved_request
from laya_cli.training.settings import TrainingSettings, TrainJobSettings


@pytest.mark.parametrize(
    "backbone, finetune, head, given, want",
    [
        ("mlp", True, "laya", {}, (0.3, "both")),  # make demo's model: α against the network's and the head's
        ("mlp", False, "laya", {}, (0.0, "head")),  # frozen: not measured to pay, so no term
        ("cnn", True, "laya", {}, (0.0, "head")),  # the CNN's stage effects tie: the term learns nothing
        ("timm:vit_base_patch16_224", False, "laya", {}, (1.0, "network")),  # frozen: its blocks can be bypassed
        ("vit_base", False, "laya", {}, (1.0, "network")),
        ("torchvision:vit_b_16", False, "laya", {}, (1.0, "network")),
        ("timm:vit_base_patch16_224", True, "laya", {}, (0.0, "head")),  # fine-tuned: not measured
        ("hf:sentence-transformers/all-MiniLM-L6-v2", False, "laya", {}, (1.0, "network")),  # frozen transformer
        ("hf:bert-base-uncased", True, "laya", {}, (0.0, "head")),  # fine-tuned: not measured
        ("hf:bert-base-uncased", False, "scalarmix", {}, (0.0, "head")),
        ("mlp", True, "last", {}, (0.0, "head")),  # no α, no term
        ("mlp", True, "laya", {"align": 0.0}, (0.0, "head")),  # --align 0 turns the default off
        ("mlp", True, "laya", {"align": 1.0}, (1.0, "both")),  # a λ alone: the kind's target
        ("cnn", True, "laya", {"align": 0.3}, (0.3, "head")),  # ... or the head's where the kind has none
        ("cnn", True, "laya", {"align_target": "network"}, (1.0, "network")),  # a target alone: λ = 1
        ("mlp", True, "laya", {"align_target": "head"}, (1.0, "head")),
    ],
)
def test_the_kind_of_model_decides_what_is_not_given(backbone, finetune, head, given, want):
    got = resolved_alignment(TrainingSettings(**given).validate(), backbone, finetune, head)
    assert (got.align, got.align_target) == want
    again = resolved_alignment(got, backbone, finetune, head)  # resolving twice changes nothing
    assert (again.align, again.align_target) == want


@pytest.mark.parametrize(
    "backbone, given, pool, want",
    [
        ("hf:m", {}, "mean", "both"),  # mean pooling: ranking + distillation keeps the accuracy
        ("hf:m", {}, "cls", "rank"),  # one token pooled: distillation costs accuracy
        ("hf:m", {}, "last", "rank"),
        ("hf:m", {"align_loss": "distill"}, "mean", "distill"),  # given: kept
        ("hf:m", {"align_target": "head"}, "mean", "rank"),  # not the kind's term: the plain ranking
        ("hf:m", {"align": 0.0}, "mean", "rank"),  # no term
        ("mlp", {}, "auto", "rank"),
    ],
)
def test_the_align_loss_follows_the_pooling(backbone, given, pool, want):
    train = TrainingSettings(**given).validate()
    early = resolved_alignment(train, backbone, False if backbone.startswith("hf") else True, "laya")
    if not given:
        assert early.align_loss is None  # before the backbone is built its pooling is not known
    got = resolved_alignment(early, backbone, False if backbone.startswith("hf") else True, "laya", pool)
    assert got.align_loss == want


def test_a_frozen_vit_removes_by_bypass_and_a_given_removal_or_target_is_kept():
    vit = resolved_alignment(TrainingSettings().validate(), "timm:vit_tiny_patch16_224", False, "laya")
    assert (vit.align_source, vit.align_removal) == ("default", "bypass")
    given = TrainingSettings(align_removal="mean-update").validate()
    assert resolved_alignment(given, "timm:vit_tiny_patch16_224", False, "laya").align_removal == "mean-update"
    head = resolved_alignment(
        TrainingSettings(align_target="head").validate(), "timm:vit_tiny_patch16_224", False, "laya"
    )
    assert (head.align_target, head.align_removal) == ("head", "auto")
    hf = resolved_alignment(TrainingSettings().validate(), "hf:m", False, "laya")
    assert hf.align_removal == "auto"  # the hf default resolves its removal from the model, as before


TIMM_FROZEN = ["--input-size", "32", "--no-pretrained", "--epochs", "1"]


def test_a_frozen_timm_vit_trains_with_the_network_term_and_a_frozen_resnet_without(tmp_path):
    """The frozen-ViT default where the blocks can be bypassed; a ResNet's stages change shape, so it trains without
    a term, recorded as a run without one and with no note (it is not a term this model lost: it never had one)."""
    pytest.importorskip("timm")
    vit, resnet = tmp_path / "vit.pt", tmp_path / "resnet.pt"
    for backbone, out in (("timm:vit_tiny_patch16_224", vit), ("timm:resnet10t", resnet)):
        r = invoke("train", "--backbone", backbone, "--dataset", "digits", *TIMM_FROZEN, "--out", out)
        assert r.exit_code == 0, r.output
        assert "note:" not in r.output
    cfg = torch.load(vit, weights_only=False)["train_config"]
    assert (cfg["align"], cfg["align_target"], cfg["align_removal"]) == (1.0, "network", "bypass")
    cfg = torch.load(resnet, weights_only=False)["train_config"]
    assert cfg["align"] == 0.0 and cfg["align_target"] == "head" and "align_dropped" not in cfg
    assert "network alignment" not in invoke("info", resnet).output


def test_a_removal_for_a_target_that_is_not_network_is_one_line():
    with pytest.raises(LayaError, match="--align-removal says how --align-target network") as e:
        resolved_alignment(TrainingSettings(align_removal="bypass").validate(), "cnn", True, "laya")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "backbone, finetune, given, want",
    [
        ("timm:vit_tiny_patch16_224", False, {}, kinds.FROZEN_VIT.sharpness),  # the kind's, with its term
        ("torchvision:vit_b_16", False, {}, kinds.FROZEN_VIT.sharpness),
        ("timm:vit_tiny_patch16_224", False, {"align_sharpness": 3.0}, 3.0),  # given: kept
        ("timm:vit_tiny_patch16_224", False, {"align_target": "head"}, 1.0),  # not the kind's term: plain ranking
        ("hf:m", False, {}, 1.0),
        ("mlp", True, {}, 1.0),
        ("cnn", True, {}, 1.0),  # no term
    ],
)
def test_the_align_sharpness_is_the_kinds_for_its_own_term(backbone, finetune, given, want):
    got = resolved_alignment(TrainingSettings(**given).validate(), backbone, finetune, "laya")
    assert got.align_sharpness == want
    assert resolved_alignment(got, backbone, finetune, "laya").align_sharpness == want  # twice: the same


def test_a_sharpness_without_a_term_is_one_line():
    with pytest.raises(LayaError, match="--align-sharpness 10 says how --align ranks"):
        resolved_alignment(TrainingSettings(align=0.0, align_sharpness=10.0).validate(), "mlp", True, "laya")
    with pytest.raises(LayaError, match="--align-sharpness 10 scales the ranking loss: --align-loss distill"):
        resolved_alignment(TrainingSettings(align=1.0, align_loss="distill", align_sharpness=10.0).validate(), "mlp",
                           True, "laya")  # fmt: skip
    kept = TrainingSettings(align=1.0, align_loss="both", align_sharpness=10.0).validate()
    assert resolved_alignment(kept, "mlp", True, "laya").align_sharpness == 10.0  # both: its ranking half reads κ
    plain = resolved_request(TrainJobSettings(backbone="cnn")).options()["train"]
    assert "align_sharpness" not in plain  # κ = 1: fingerprinted as a run before the option existed


def test_the_request_resolves_before_its_fingerprint():
    assert resolved_request(TrainJobSettings()).train.align == 0.3
    assert resolved_request(TrainJobSettings(finetune=False)).train.align == 0.0
    cnn = resolved_request(TrainJobSettings(backbone="cnn")).options()["train"]  # no term: as a run before the defaults
    assert "align" not in cnn and "align_target" not in cnn


def test_laya_train_records_the_resolved_default_and_info_shows_it(tmp_path):
    out = tmp_path / "m.pt"
    r = invoke("train", "--dataset", "digits", "--epochs", "1", "--out", out, "-q")
    assert r.exit_code == 0, r.output
    cfg = torch.load(out, weights_only=False)["train_config"]
    assert (cfg["align"], cfg["align_target"], cfg["align_removal"]) == (0.3, "both", "mean")
    info = invoke("info", out)
    assert "--align 0.3" in info.output and "--align-target both" in info.output


def test_the_align_loss_is_recorded_and_a_frozen_network_term_trains_with_it(tmp_path):
    out = tmp_path / "m.pt"
    args = ["--frozen", "--align", "1", "--align-target", "network", "--align-loss", "both", "--align-sharpness", "5"]
    r = invoke("train", "--dataset", "digits", "--epochs", "1", "--out", out, "-q", *args)
    assert r.exit_code == 0, r.output
    cfg = torch.load(out, weights_only=False)["train_config"]
    assert (cfg["align"], cfg["align_target"], cfg["align_loss"]) == (1.0, "network", "both")
    assert cfg["align_sharpness"] == 5.0
    assert "--align-loss both" in invoke("info", out).output


def test_align_zero_with_the_network_target_is_one_line(tmp_path):
    r = invoke("train", "--dataset", "digits", "--align", "0", "--align-target", "network", "--out", tmp_path / "m.pt")
    assert_user_error(r, "--align-target network says what --align trains α against")
    assert list(tmp_path.iterdir()) == []


def test_torchrun_trains_with_the_default_term_too(monkeypatch):
    """The default term runs data-parallel (issue 47): under torchrun it is not dropped."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    got = resolved_alignment(TrainingSettings().validate(), "mlp", True, "laya")
    assert (got.align, got.align_target) == (0.3, "both")
    assert got.exit_aware == 0.0  # a classifier's --exit-aware is one process only: its default is not taken there
    assert resolved_alignment(TrainingSettings().validate(), "lm", False, "laya").exit_aware == 1.0  # the LM's runs


@pytest.mark.parametrize(
    "backbone, finetune, head, given, want",
    [
        ("mlp", True, "laya", {}, 1.0),  # make demo's model: the truncated head trained too
        ("mlp", False, "laya", {}, 0.0),  # frozen: not measured
        ("cnn", True, "laya", {}, 0.0),
        ("hf:m", False, "laya", {}, 0.0),
        ("lm", False, "laya", {}, 1.0),  # --task lm
        ("mlp", True, "scalarmix", {}, 0.0),  # the defaults are the laya head's
        ("mlp", True, "laya", {"exit_aware": 0.0}, 0.0),  # given: kept
        ("cnn", True, "laya", {"exit_aware": 0.5}, 0.5),
    ],
)
def test_the_kind_of_model_decides_exit_aware_training_when_not_given(backbone, finetune, head, given, want):
    got = resolved_alignment(TrainingSettings(**given).validate(), backbone, finetune, head)
    assert got.exit_aware == want
    assert resolved_alignment(got, backbone, finetune, head).exit_aware == want  # resolving twice changes nothing


# --------------------------------------------------------------------------- a default term that cannot run


@pytest.fixture
def frozen_mlp_default(monkeypatch):
    """As if the frozen mlp's default were the network term (the frozen kinds that have one are hub models)."""
    table = {**kinds.ALIGN_DEFAULTS, ("mlp", False): kinds.AlignDefault(1.0, "network")}
    monkeypatch.setattr(kinds, "ALIGN_DEFAULTS", table)


def test_a_default_term_on_a_store_trains(tmp_path, monkeypatch, frozen_mlp_default):
    """The frozen network target runs on a feature store (its cached removals looked up by the rows the store's
    batches carry): the kind's default is kept, not dropped."""
    monkeypatch.setenv("LAYA_IN_MEMORY_MB", "1")  # the train split's 4.4 MiB of features go to the sharded store
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "m.pt"
    r = invoke("train", "--dataset", "digits", "--frozen", "--epochs", "1", "--out", out)
    assert r.exit_code == 0, r.output
    assert "sharded feature store" in r.output and "note: training without" not in r.output
    assert "caching the pooled taps with each of 3 blocks removed, for 162 of 1295 training rows" in r.output
    cfg = torch.load(out, weights_only=False)["train_config"]
    assert (cfg["align"], cfg["align_target"], cfg["align_source"]) == (1.0, "network", "default")
    assert "align_dropped" not in cfg
    assert "trained without the" not in invoke("info", out).output


def test_the_same_term_given_on_a_store_trains(tmp_path, monkeypatch, frozen_mlp_default):
    """LAYA_IN_MEMORY_MB=0: every split in the store, and the cache capped to one row (the cap's line: its test in
    test_network_alignment.py); it still trains, nothing refused."""
    monkeypatch.setenv("LAYA_IN_MEMORY_MB", "0")
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "m.pt"
    r = invoke(
        "train", "--dataset", "digits", "--frozen", "--epochs", "1", "--align-target", "network", "--out", out, "-q"
    )
    assert r.exit_code == 0, r.output
    assert list((tmp_path / "cache").glob("*.store"))
    cfg = torch.load(out, weights_only=False)["train_config"]
    assert (cfg["align"], cfg["align_target"], cfg["align_source"]) == (1.0, "network", "given")


def test_a_default_term_on_loaders_of_features_only_is_dropped(monkeypatch, frozen_mlp_default):
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import laya_cli

    monkeypatch.setattr(defaults, "kind_default", lambda *_: defaults.AlignDefault(1.0, "network"))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 1, 4, 3, generator=g), torch.randint(0, 3, (96,), generator=g)
    first = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.GELU())
    net = nn.Sequential(first, *(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(2)))  # three blocks
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    model = laya_cli.fit(laya_cli.attach(net), loader, loader, epochs=1, seed=0, progress=False)
    cfg = model.checkpoint["train_config"]
    assert (cfg["align"], cfg["align_source"]) == (0.0, "default") and "not only features" in cfg["align_dropped"]
    with pytest.raises(LayaError, match="not only features"):
        laya_cli.fit(laya_cli.attach(net), loader, loader, epochs=1, seed=0, progress=False, align_target="network")


def test_the_source_is_recorded_but_not_fingerprinted():
    given = TrainJobSettings(train=TrainingSettings(align=0.3, align_target="both"))
    assert resolved_request(TrainJobSettings()).train.align_source == "default"
    assert resolved_request(given).train.align_source == "given"
    assert resolved_request(TrainJobSettings()).fingerprint() == resolved_request(given).fingerprint()


def test_a_frozen_hf_transformer_trains_with_its_default_term(text_ckpt):
    """conftest's tiny BERT, frozen, --pool mean, no alignment option: the kind's term for that pooling."""
    cfg = torch.load(text_ckpt.ckpt, weights_only=False)["train_config"]
    assert (cfg["align"], cfg["align_target"], cfg["align_loss"], cfg["align_source"]) == (
        1.0,
        "network",
        "both",
        "default",
    )
    assert cfg["align_removal"] == "bypass"  # BERT's layers keep their input's shape


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--align-target", "both", "--head", "concat"], "--align-target needs input-conditioned attention"),
        (["--align-target", "both", "--align", "0"], "--align-target both says what --align trains α against"),
    ],
)
def test_the_both_target_where_it_cannot_run_is_one_line(tmp_path, extra, fragment):
    r = invoke("train", "--dataset", "digits", *extra, "--out", tmp_path / "m.pt")
    assert_user_error(r, fragment)
    assert list(tmp_path.iterdir()) == []
