"""Training that keeps α informative (training/shaping.py): --layer-norm, --layer-dropout, --alpha-entropy (and its
schedule), --tau-start — each changes training as it says, is off at evaluation, round-trips in the checkpoint, and
bad values are one line, exit 2."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_user_error, invoke

from benchmarks.synthetic import make_head_and_features
from laya_cli.auditing.collapse import alpha_entropy
from laya_cli.data.settings import DataSettings
from laya_cli.model.heads import build_head
from laya_cli.model.settings import HeadSettings
from laya_cli.training.loop import fit
from laya_cli.training.settings import TrainingSettings, TrainJobSettings
from laya_cli.training.shaping import (
    AlphaShaping,
    entropy_deficit,
    entropy_weight,
    layer_dropout_mask,
    tau_at,
)


def test_layer_dropout_never_drops_every_layer():
    torch.manual_seed(0)
    for n_layers in (1, 2, 3, 6):
        mask = layer_dropout_mask(5000, n_layers, 0.95)
        assert mask.shape == (5000, n_layers) and set(mask.unique().tolist()) <= {0.0, 1.0}
        assert (mask.sum(-1) >= 1).all()
    kept = layer_dropout_mask(20000, 6, 0.3).mean().item()
    assert kept == pytest.approx(0.7, abs=0.01)  # each layer dropped with chance P (rows that lost all: rare)
    assert (layer_dropout_mask(10, 4, 0.0) == 1).all()


def _separable(n=384, dims=(6, 6, 6, 6), seed=0):
    """Features where the last layer alone holds the class (the others are noise): α collapses onto it."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    feats = [torch.randn(n, d, generator=g) for d in dims]
    feats[-1] = feats[-1] * 0.3 + 4 * torch.nn.functional.one_hot(y, dims[-1]).float()
    return feats, y


def _fit(cfg: TrainingSettings, layer_norm: bool = False, spy=None):
    feats, y = _separable()
    torch.manual_seed(cfg.seed)
    head = build_head(
        "laya", [f.shape[1] for f in feats], 3, HeadSettings(d_star=8, score_hidden=16, layer_norm=layer_norm)
    )
    if spy is not None:
        head.register_forward_pre_hook(spy, with_kwargs=True)
    shaping = AlphaShaping(cfg, head) if AlphaShaping.wanted(cfg) else None
    fit(head, (feats, y), (feats, y), cfg, shaping=shaping)
    with torch.no_grad():
        alpha = head.eval()(feats).alpha
    return head, alpha


def test_layer_dropout_masks_training_steps_only():
    seen = []

    def spy(module, args, kwargs):
        mask = kwargs.get("alpha_mask")
        seen.append((module.training, None if mask is None else mask.clone()))

    _fit(TrainingSettings(epochs=2, batch_size=64, lr=1e-2, seed=0, layer_dropout=0.5), spy=spy)
    train_masks = [m for training, m in seen if training]
    assert train_masks and all(m is not None for m in train_masks)
    stacked = torch.cat(train_masks)
    assert (stacked.sum(-1) >= 1).all() and (stacked == 0).any()  # layers dropped, never all of a sample's
    assert all(m is None for training, m in seen if not training)  # validation sees every layer


def test_the_entropy_term_spreads_alpha():
    plain = _fit(TrainingSettings(epochs=15, batch_size=64, lr=1e-2, seed=0))[1]
    spread = _fit(TrainingSettings(epochs=15, batch_size=64, lr=1e-2, seed=0, alpha_entropy=1.0))[1]
    assert alpha_entropy(spread).mean() > alpha_entropy(plain).mean() + 0.3
    assert alpha_entropy(spread).mean() > 0.8 * math.log(4)


def test_entropy_deficit_is_the_normalised_kl_to_uniform_of_the_collapse_entropy():
    head, feats, _ = make_head_and_features("laya")
    z = head.embed(feats)
    log_alpha = head.log_attention(z)
    expected = (1 - alpha_entropy(head.attention(z)) / math.log(len(feats))).mean()
    assert entropy_deficit(log_alpha).item() == pytest.approx(expected.item(), abs=1e-6)
    assert entropy_deficit(torch.full((3, 4), math.log(0.25))).item() == pytest.approx(0.0, abs=1e-7)
    one_hot = torch.log_softmax(torch.tensor([[60.0, 0, 0, 0]]), -1)
    assert entropy_deficit(one_hot).item() == pytest.approx(1.0, abs=1e-6)
    assert torch.isfinite(torch.autograd.functional.jacobian(entropy_deficit, one_hot)).all()  # a gradient at 0


def test_schedules():
    assert [entropy_weight(0.5, "constant", e, 5) for e in (1, 3, 5)] == [0.5, 0.5, 0.5]
    assert [entropy_weight(0.5, "linear", e, 5) for e in (1, 3, 5)] == [0.5, 0.25, 0.0]
    assert [tau_at(6.0, 1.5, e, 4) for e in (1, 2, 4, 9)] == [6.0, 4.5, 1.5, 1.5]


def test_tau_start_anneals_training_and_leaves_the_heads_own_tau():
    taus = []

    def spy(module, args, kwargs):
        taus.append((module.training, module.tau))

    head, _ = _fit(TrainingSettings(epochs=3, batch_size=128, lr=1e-2, seed=0, tau_start=6.0), spy=spy)
    assert {t for training, t in taus if training} == {6.0, 3.75, 1.5}
    assert {t for training, t in taus if not training} == {1.5}  # validation at --tau
    assert head.tau == 1.5


def test_layer_norm_reads_every_layer_at_one_scale_without_parameters():
    head, feats, _ = make_head_and_features("laya")
    normed = build_head(
        "laya", [f.shape[1] for f in feats], 5, HeadSettings(d_star=8, score_hidden=16, layer_norm=True)
    )
    assert normed.state_dict().keys() == head.state_dict().keys()  # LayerNorm without affine: no new weights
    normed.load_state_dict(head.state_dict())
    scaled = [f * s + 3.0 for f, s in zip(feats, (10.0, 2.0, 1.0, 50.0))]
    torch.testing.assert_close(normed(scaled).logits, normed(feats).logits, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(head(scaled).logits, head(feats).logits)


def test_defaults_keep_the_recorded_options_of_earlier_runs():
    options = TrainJobSettings().options()
    assert "layer_norm" not in options["head_config"]
    assert not {"layer_dropout", "alpha_entropy", "alpha_entropy_schedule", "tau_start"} & set(options["train"])


def test_options_round_trip_in_the_checkpoint(tmp_path):
    from laya_cli.model.checkpoint import read_checkpoint
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model
    from laya_cli.runtime import progress
    from laya_cli.training.job import train
    from laya_cli.training.loop import predict

    shaped = {"layer_dropout": 0.3, "alpha_entropy": 0.5, "alpha_entropy_schedule": "linear", "tau_start": 4.0}
    req = TrainJobSettings(
        data=DataSettings("digits", seed=0),
        head_config=HeadSettings(d_star=16, score_hidden=32, layer_norm=True),
        train=TrainingSettings(epochs=2, seed=0, **shaped),
        out=str(tmp_path / "m.pt"),
    )
    with progress.enabled(False):
        train(req)
    ckpt = read_checkpoint(tmp_path / "m.pt")
    assert ckpt["head"]["config"]["layer_norm"] is True and ckpt["head"]["config"]["tau"] == 1.5
    assert {k: ckpt["train_config"][k] for k in shaped} == shaped
    model = load_model(tmp_path / "m.pt")
    assert model.head.layer_norm is True and model.head.tau == 1.5
    data = load_eval_data(model)
    feats = data.features.feats if hasattr(data.features, "feats") else data.features
    correct = (predict(model.head, feats) == data.features.labels).double().mean().item()
    assert correct == pytest.approx(ckpt["metrics"]["test_accuracy"], abs=1e-6)  # stored as float32


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--layer-dropout", "1"], ["--layer-dropout must be in [0, 1)"]),
        (["--layer-dropout", "-0.1"], ["--layer-dropout must be in [0, 1)"]),
        (["--alpha-entropy", "-1"], ["--alpha-entropy must be 0 (off) or positive"]),
        (["--alpha-entropy-schedule", "cosine"], ["--alpha-entropy-schedule"]),
        (["--tau-start", "0"], ["--tau-start must be positive"]),
        (["--head", "last", "--layer-dropout", "0.3"], ["--head laya or scalarmix"]),
        (["--head", "scalarmix", "--alpha-entropy", "0.1"], ["--alpha-entropy", "--head laya"]),
        (["--head", "concat", "--tau-start", "3"], ["--tau-start", "--head laya"]),
    ],
)
def test_bad_values_are_one_line_and_exit_2(tmp_path, args, fragments):
    assert_user_error(invoke("train", "--out", tmp_path / "m.pt", "--epochs", "1", "-q", *args), *fragments)


def test_the_head_config_records_layer_norm_only_when_on():
    assert "layer_norm" not in HeadSettings().to_dict()  # a default run's checkpoint config is what it was before
    assert HeadSettings(layer_norm=True).to_dict()["layer_norm"] is True
    assert HeadSettings(**HeadSettings().to_dict()).layer_norm is False


def test_the_audit_says_gradxact_is_void_on_a_layer_norm_head(tmp_path):
    import json

    out = tmp_path / "m.pt"
    assert invoke("train", "--dataset", "digits", "--epochs", "1", "--layer-norm", "--out", out, "-q").exit_code == 0
    report = tmp_path / "a.json"
    r = invoke("audit", out, "--compare", "gradxact,ig", "--samples", "20", "--ci", "0", "--json", report)
    assert r.exit_code == 0, r.output
    notes = json.loads(report.read_text())["notes"]
    assert any(n.startswith("gradxact: this head normalises every layer") for n in notes), notes
    plain = tmp_path / "plain.pt"
    assert invoke("train", "--dataset", "digits", "--epochs", "1", "--out", plain, "-q").exit_code == 0
    r = invoke("audit", plain, "--compare", "gradxact", "--samples", "20", "--ci", "0", "--json", report, "--overwrite")
    assert not any("normalises every layer" in n for n in json.loads(report.read_text())["notes"])
