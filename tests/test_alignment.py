"""laya train --align λ: the ranking loss against a by-hand loop, what its gradient reaches, λ = 0
is plain training, the bench variant, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_user_error, invoke

from benchmarks.synthetic import make_head_and_features, train_digits
from laya_cli.auditing.metrics import lolo_effects
from laya_cli.runtime.declare import evolve
from laya_cli.runtime.errors import LayaError
from laya_cli.training.alignment import (
    Alignment,
    alignment_loss,
    distillation_loss,
    fitting_loss,
    ranking_loss,
)
from laya_cli.training.bench import BenchSettings, parse_heads
from laya_cli.training.defaults import resolved_request
from laya_cli.training.settings import TrainingSettings, TrainJobSettings


def ranking_loss_by_hand(log_alpha, delta) -> float:
    total, pairs = 0.0, 0
    for a, d in zip(log_alpha.tolist(), delta.tolist()):
        for i in range(len(a)):
            for j in range(i + 1, len(a)):
                if d[i] == d[j]:
                    continue  # tied effects make no pair
                s = 1.0 if d[i] > d[j] else -1.0
                total += math.log1p(math.exp(-s * (a[i] - a[j])))
                pairs += 1
    return total / max(pairs, 1)


def test_ranking_loss_equals_a_loop_over_layer_pairs():
    g = torch.Generator().manual_seed(0)
    log_alpha = torch.randn(6, 5, generator=g, dtype=torch.float64)
    delta = torch.randn(6, 5, generator=g, dtype=torch.float64).round(decimals=0)  # plenty of ties
    assert ranking_loss(log_alpha, delta).item() == pytest.approx(ranking_loss_by_hand(log_alpha, delta), rel=1e-12)
    assert ranking_loss(log_alpha, torch.zeros_like(delta)).item() == 0.0  # no pair at all


def test_distillation_is_the_cross_entropy_to_the_softened_effects_and_both_is_the_sum():
    g = torch.Generator().manual_seed(4)
    log_alpha = torch.log_softmax(torch.randn(6, 5, generator=g), -1)
    delta = torch.rand(6, 5, generator=g) - 0.3
    want = sum(
        -sum(math.exp(delta[b, i] / 0.1) / sum(math.exp(d / 0.1) for d in delta[b].tolist()) * log_alpha[b, i]
             for i in range(5))
        for b in range(6)
    ) / 6  # fmt: skip
    assert distillation_loss(log_alpha, delta).item() == pytest.approx(float(want), rel=1e-5)
    assert fitting_loss(log_alpha, delta, "rank") == ranking_loss(log_alpha, delta)
    both = fitting_loss(log_alpha, delta, "both")
    assert both.item() == pytest.approx((ranking_loss(log_alpha, delta) + distillation_loss(log_alpha, delta)).item())
    assert distillation_loss(log_alpha[:0], delta[:0]).item() == 0.0  # no rows: nothing to fit
    matched = torch.log_softmax(delta / 0.1, -1)  # α equal to the target: the loss is its entropy, the minimum
    assert distillation_loss(matched, delta) < distillation_loss(log_alpha, delta)


def test_sharpness_scales_the_log_alpha_gaps_the_ranking_loss_reads():
    g = torch.Generator().manual_seed(2)
    log_alpha = torch.randn(4, 6, generator=g, dtype=torch.float64)
    delta = torch.randn(4, 6, generator=g, dtype=torch.float64)
    assert ranking_loss(log_alpha, delta, sharpness=10.0) == ranking_loss(10 * log_alpha, delta)
    assert fitting_loss(log_alpha, delta, "rank", sharpness=10.0) == ranking_loss(10 * log_alpha, delta)
    assert fitting_loss(log_alpha, delta, "distill", sharpness=10.0) == distillation_loss(log_alpha, delta)
    # an order kept by gaps of 0.5 nats: nearly satisfied at κ = 10, not at κ = 1 (which asks for a steeper α)
    order = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    gentle = torch.log_softmax(-0.5 * torch.arange(4.0), -1).unsqueeze(0)
    assert ranking_loss(gentle, order, sharpness=10.0) < 0.01 < 0.2 < ranking_loss(gentle, order)


def test_ranking_loss_is_small_when_alpha_orders_layers_as_their_effects():
    delta = torch.tensor([[0.5, 0.1, 0.3]])
    agree = torch.log_softmax(20 * delta, -1)
    disagree = torch.log_softmax(-20 * delta, -1)
    assert ranking_loss(agree, delta) < 0.05 < 3 < ranking_loss(disagree, delta)


def test_alignment_loss_uses_the_audit_effects_and_trains_only_the_scorer():
    head, feats, ref = make_head_and_features("laya")
    target = head(feats).logits.argmax(-1)
    alpha = head.attention(head.embed(feats))
    expected = ranking_loss(torch.log(alpha), lolo_effects(head, feats, target, ref, "mean"))
    loss = alignment_loss(head, feats, target, ref)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert head.scorer[0].weight.grad is not None and head.scorer[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in (*head.adapters.parameters(), *head.classifier.parameters()))


def test_the_ema_reference_follows_the_batches_and_survives_a_resume():
    head, feats, _ = make_head_and_features("laya")
    a = Alignment(1.0)
    logits = head(feats).logits
    a.loss(head, feats, logits)
    torch.testing.assert_close(a.reference[0], feats[0].mean(0))
    a.loss(head, [f + 1 for f in feats], logits)
    torch.testing.assert_close(a.reference[0], feats[0].mean(0) + 0.05)  # momentum 0.95
    b = Alignment(1.0)
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b.reference[0], a.reference[0])
    fixed = Alignment(1.0, [torch.zeros(d) for d in (12, 8, 6, 10)])
    fixed.loss(head, feats, logits)
    assert fixed.reference[0].abs().sum() == 0 and fixed.state_dict() == {"reference": None}


def test_align_zero_is_plain_training_and_keeps_fingerprints(tmp_path):
    cnn = resolved_request(TrainJobSettings(backbone="cnn"))  # a kind without a default term
    assert "align" not in cnn.options()["train"]  # resume states and bench records stay valid
    assert (
        cnn.fingerprint()
        == resolved_request(TrainJobSettings(backbone="cnn", train=TrainingSettings(align=0.0))).fingerprint()
    )
    mlp = resolved_request(TrainJobSettings())  # the mlp's default term is not the plain run an old state holds
    assert mlp.fingerprint() != resolved_request(TrainJobSettings(train=TrainingSettings(align=0.0))).fingerprint()
    plain = torch.load(train_digits(tmp_path / "plain.pt", epochs=2, backbone="cnn", align=None), weights_only=False)
    zero = torch.load(train_digits(tmp_path / "zero.pt", epochs=2, backbone="cnn", align=0.0), weights_only=False)
    for k, v in plain["head"]["weights"].items():
        assert torch.equal(v, zero["head"]["weights"][k]), k


def test_aligned_training_end_to_end_and_frozen(tmp_path, image_folder):
    aligned = torch.load(train_digits(tmp_path / "aligned.pt", epochs=2, align=1.0), weights_only=False)
    plain = torch.load(train_digits(tmp_path / "plain.pt", epochs=2), weights_only=False)
    assert aligned["train_config"]["align"] == 1.0
    assert any(not torch.equal(v, plain["head"]["weights"][k]) for k, v in aligned["head"]["weights"].items())
    assert aligned["metrics"]["test_accuracy"] > 0.8
    res = invoke(
        "train",
        "--backbone",
        "cnn",
        "--frozen",
        "--dataset",
        f"folder:{image_folder}",
        "--epochs",
        "2",
        "--align",
        "1",
        "--out",
        tmp_path / "frozen.pt",
        "-q",
    )
    assert res.exit_code == 0, res.output
    assert invoke("audit", tmp_path / "frozen.pt", "--compare", "", "-q").exit_code == 0


def test_bench_compares_an_aligned_laya_head():
    assert parse_heads("laya,LAYA-Aligned") == ["laya", "laya-aligned"]
    bench = BenchSettings(heads=["laya", "laya-aligned"], align=0.5).validate()
    req = bench.train_request("laya-aligned", 1338)
    assert (req.head, req.train.align, req.train.seed) == ("laya", 0.5, 1338)
    default = bench.train_request("laya", 1338).train  # as laya train resolves it: the mlp's default term
    assert (default.align, default.align_target) == (0.3, "both")
    bench.train = evolve(bench.train, backbone="cnn")  # settings are frozen: a new template
    assert bench.train_request("laya", 1338).train.align == 0.0
    assert str(bench.run_path("laya-aligned", 1338, ".pt")).endswith("laya-aligned-seed1338.pt")
    with pytest.raises(LayaError, match="--align must be positive"):
        BenchSettings(heads=["laya-aligned"], align=0.0).validate()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--align", "-1"], "--align must be 0 (off) or positive"),
        (["--align", "1", "--head", "last"], "--align needs input-conditioned attention"),
        (["--align", "nan"], "--align must be 0 (off) or positive"),
        (["--align", "0", "--align-loss", "both"], "--align-loss both says how --align fits α"),
        (["--align-loss", "everything"], "--align-loss"),
        (["--frozen", "--align-loss", "distill"], "this run has no alignment term"),  # the frozen kind: no term
    ],
)
def test_bad_align_is_one_line_exit_2(tmp_path, args, fragment):
    res = invoke("train", "--dataset", "digits", "--epochs", "1", "--out", tmp_path / "m.pt", *args)
    assert_user_error(res, fragment)
    assert not (tmp_path / "m.pt").exists()


def test_the_term_is_weighted_by_lambda():
    head, feats, ref = make_head_and_features("laya")
    logits = head(feats).logits
    term = Alignment(2.0, ref).loss(head, feats, logits)
    assert term.item() == pytest.approx(2.0 * alignment_loss(head, feats, logits.argmax(-1), ref).item())


def test_head_scope_alignment_also_trains_the_adapters():
    head, feats, ref = make_head_and_features("laya")
    target = head(feats).logits.argmax(-1)
    scorer_only = alignment_loss(head, feats, target, ref)
    whole = alignment_loss(head, feats, target, ref, scope="head")
    torch.testing.assert_close(whole, scorer_only)  # the same term; only where its gradient goes differs
    whole.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in head.adapters.parameters())
    assert head.scorer[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in head.classifier.parameters())


def test_validation_faithfulness_is_the_mean_spearman_of_alpha_and_lolo_effects():
    from scipy.stats import spearmanr

    from laya_cli.training.stopping import stopping_score, validation_faithfulness

    head, feats, ref = make_head_and_features("laya")
    got = validation_faithfulness(head, feats, ref, batch_size=7)  # several batches
    with torch.no_grad():
        out = head(feats)
        delta = lolo_effects(head, feats, out.logits.argmax(-1), ref, "mean")
    rhos = [spearmanr(a.numpy(), d.numpy()).statistic for a, d in zip(out.alpha, delta)]
    rhos = [r for r, d in zip(rhos, delta) if (d != d[0]).sum() > 1 and not math.isnan(r)]
    assert got == pytest.approx(sum(rhos) / len(rhos), abs=1e-9)
    assert stopping_score(0.9, None) == 0.9 and stopping_score(0.9, 0.5) == pytest.approx(1.4)
    assert stopping_score(0.9, math.nan) == 0.9


def test_stop_on_combined_records_faithfulness_and_keeps_its_best_epoch(tmp_path):
    from laya_cli.model.checkpoint import read_checkpoint

    ckpt = read_checkpoint(train_digits(tmp_path / "c.pt", epochs=6, align=1.0, stop_on="combined"))
    history = ckpt["history"]
    assert all(isinstance(r["val_faithfulness"], float) for r in history)
    best = [r for r in history if r["best"]][-1]
    score = lambda r: r["val_accuracy"] + r["val_faithfulness"]
    assert best["epoch"] == ckpt["metrics"]["best_epoch"] and best["val_accuracy"] == ckpt["metrics"]["val_accuracy"]
    assert score(best) == max(score(r) for r in history)
    assert ckpt["train_config"]["stop_on"] == "combined"
    plain = read_checkpoint(train_digits(tmp_path / "p.pt", epochs=3))
    assert all(r["val_faithfulness"] is None for r in plain["history"])


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--stop-on", "combined", "--head", "last"], "--stop-on combined"),
        (["--stop-on", "loss"], "--stop-on"),
        (["--align", "1", "--align-scope", "adapters"], "--align-scope"),
    ],
)
def test_bad_stopping_and_align_scope_are_one_line_exit_2(tmp_path, args, fragment):
    assert_user_error(invoke("train", "--out", str(tmp_path / "x.pt"), *args), fragment)
