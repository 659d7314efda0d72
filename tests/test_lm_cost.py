"""Language models at the model's own cost (issue 49): the lens read in one readout call per chunk of positions and
on a sample of them, each checked against the plain computation (every layer alone, every position), ``--lens``
choosing what is trained and measured, and its bad values refused in one line. Speed: ``benchmarks/lm_cost.py``."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from laya_cli.backbones.lm import build_language_model
from laya_cli.backbones.spec import BackboneSpec
from laya_cli.data.corpus import open_corpus
from laya_cli.features.lm_positions import batches, token_states
from laya_cli.model import lm_heads
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.lm_heads import lm_from_checkpoint
from laya_cli.training import lm as lm_train
from laya_cli.training.lm import evaluate, lens_rows
from tests.helpers import assert_user_error, invoke, make_lm_folder, sentences

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lmcost"), sentences(400), 330)


@pytest.fixture(scope="module")
def lm(lm_dir):
    return build_language_model(BackboneSpec(f"hf:{lm_dir / 'model'}", pretrained=True, task="lm"))


def _heads(lm, seed=0):
    torch.manual_seed(seed)
    laya = lm_heads.LayaLMHead(lm.num_layers, 32, lm.readout, lm_heads.HeadSettings())
    tuned = lm_heads.TunedLens(lm.num_layers, 32, lm.readout)
    with torch.no_grad():  # a tuned lens away from the identity: its layers differ from the logit lens's
        for t in tuned.translators:
            t.weight.add_(0.3 * torch.randn_like(t.weight))
    return laya, tuned


def _train_args(lm_dir, out, *extra):
    return ["train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}",
            "--epochs", "1", "--block-size", "16", "--batch-size", "16", "--eval-tokens", "200", "--out", out,
            *extra]  # fmt: skip


@pytest.mark.parametrize("name", ["kl", "ce"])
def test_the_fused_loss_and_its_gradient_are_the_definitions(name):
    g = torch.Generator().manual_seed(0)
    final, logits = torch.randn(5, 11, generator=g) * 3, torch.randn(5, 3, 11, generator=g, requires_grad=True) * 1
    logits = logits.detach().requires_grad_()
    y = torch.randint(0, 11, (5,), generator=g)
    ref = lm_heads.Reference.of(final)
    got = lm_heads.fused_loss(name, logits, ref, y)
    flat, ys = logits.reshape(15, 11), y.repeat_interleave(3)
    want = (lm_heads.kl_to(torch.log_softmax(final, -1).repeat_interleave(3, 0), flat) if name == "kl"
            else lm_heads.cross_entropy(flat, ys)).reshape(5, 3)  # fmt: skip
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    weights = torch.rand(5, 3, generator=g)
    (mine,) = torch.autograd.grad((got * weights).sum(), logits)
    (plain,) = torch.autograd.grad((want * weights).sum(), logits)
    torch.testing.assert_close(mine, plain, rtol=1e-5, atol=1e-6)
    kl, ce = lm_heads.kl_and_ce(logits, ref, y)
    torch.testing.assert_close(kl if name == "kl" else ce, want, rtol=1e-5, atol=1e-6)


def test_the_fused_lens_loss_and_its_gradients_are_every_layer_read_alone(lm, lm_dir):
    """train_step reads every layer of a chunk of positions in one readout call, the rows chunked: its loss and
    gradients are those of the plain sum over layers and positions, one layer at a time."""
    x = next(iter(batches(lm, open_corpus(str(lm_dir / "corpus")), "train", 16, 4)))
    hs, y = token_states(lm, x)
    laya, tuned = _heads(lm)
    opt = torch.optim.SGD([*laya.parameters(), *tuned.parameters()], lr=0.0)  # lr 0: the gradients are kept
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lm_heads, "LOGITS_PER_CHUNK", lm.readout.vocabulary * 4 * 3)  # 3 positions' layers per chunk
        got = lm_train.train_step(laya, tuned, hs, y, "kl", opt, 0.0)
    grads = {n: p.grad.clone() for n, p in tuned.translators.named_parameters()}
    for p in tuned.translators.parameters():
        p.grad = None
    final = torch.log_softmax(lm.readout(hs[:, -1]).float(), -1)
    with torch.no_grad():
        laya_loss = lm_heads.kl_to(final, laya(hs)[0]).mean()
    plain = sum(lm_heads.kl_to(final, tuned.layer_logits(hs, i)).mean() for i in range(lm.num_layers))
    plain.backward()
    assert got == pytest.approx(float(laya_loss + plain), rel=1e-5)
    for n, p in tuned.translators.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-7, msg=n)


def test_chunked_held_out_table_equals_the_unchunked_one(lm, lm_dir, monkeypatch):
    corpus = open_corpus(str(lm_dir / "corpus"))
    blocks = list(batches(lm, corpus, "test", 16, 4))[:2]
    laya, tuned = _heads(lm)
    whole = evaluate(lm, laya, tuned, iter(blocks), 10**9)
    monkeypatch.setattr(lm_heads, "LOGITS_PER_CHUNK", lm.readout.vocabulary * 5)  # 5 rows (1 position's layers)
    parts = evaluate(lm, laya, tuned, iter(blocks), 10**9)
    for a, b in zip(whole["layers"], parts["layers"]):
        for k in ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce", "alpha"):
            assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-6), k
    # and each layer's tuned KL is that layer read alone through the readout
    hs, y = zip(*(token_states(lm, x) for x in blocks))
    hs = torch.cat(hs)
    final = torch.log_softmax(lm.readout(hs[:, -1]).float(), -1)
    for i, row in enumerate(whole["layers"]):
        alone = float(lm_heads.kl_to(final, tuned.layer_logits(hs, i)).mean()) * lm_heads.BITS
        assert row["tuned_kl"] == pytest.approx(alone, rel=1e-5, abs=1e-6)


def test_the_sampled_lens_table_estimates_the_exact_one(lm, lm_dir):
    """--lens-tokens N: N seeded positions spread over the batches; over seeds the estimates centre on the exact
    table, and the 95 % interval holds the exact value about as often as it says."""
    corpus = open_corpus(str(lm_dir / "corpus"))
    blocks = list(batches(lm, corpus, "test", 16, 4))[:6]
    laya, tuned = _heads(lm)
    exact = evaluate(lm, laya, tuned, iter(blocks), 10**9)
    assert exact["lens"]["tokens"] == exact["tokens"] == 6 * 4 * 15
    runs = [evaluate(lm, laya, tuned, iter(blocks), 360, "tuned", 72, seed) for seed in range(24)]  # 12 a batch
    assert {r["lens"]["tokens"] for r in runs} == {6 * 12}
    assert all(r["heads"] == exact["heads"] for r in runs)  # the head is measured on every position
    covered, total = 0, 0
    for i, e in enumerate(exact["layers"][:-1]):
        for k in ("tuned_kl", "logit_kl"):
            values = [r["layers"][i][k] for r in runs]
            spread = statistics.stdev(values) / len(values) ** 0.5
            assert abs(statistics.fmean(values) - e[k]) <= 4 * spread + 1e-9, (i, k)
            covered += sum(abs(r["layers"][i][k] - e[k]) <= r["layers"][i][f"{k}_ci"] for r in runs)
            total += len(runs)
    assert covered / total > 0.8  # a 95 % interval (a finite population, sampled without replacement: wider)


def test_lens_rows_draws_k_distinct_positions_alike_on_every_rank():
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    rows = lens_rows(4, 15, 7, g())
    assert len(rows) == 7 and len(set(rows.tolist())) == 7 and rows.min() >= 0 and rows.max() < 60
    assert torch.equal(rows, lens_rows(4, 15, 7, g()))
    assert lens_rows(4, 15, 0, g()) is None and lens_rows(4, 15, 60, g()) is None  # 0 or ≥ the batch: all


def test_lens_none_trains_no_lens_and_lens_logit_measures_only_it(lm_dir, tmp_path):
    r = invoke(*_train_args(lm_dir, tmp_path / "none.pt", "--lens", "none"))
    assert r.exit_code == 0, r.output
    ckpt = read_checkpoint(tmp_path / "none.pt")
    assert ckpt["tuned_lens"] is None and ckpt["lens"] == {"kind": "none", "sample": 16, "tokens": 256}
    assert all(set(row) == {"alpha"} for row in ckpt["metrics"]["layers"]) and "no lens measured" in r.output
    r = invoke(*_train_args(lm_dir, tmp_path / "logit.pt", "--lens", "logit", "--lens-tokens", "0"))
    assert r.exit_code == 0, r.output
    ckpt = read_checkpoint(tmp_path / "logit.pt")
    rows = ckpt["metrics"]["layers"]
    assert ckpt["tuned_lens"] is None and all("tuned_kl" not in row and "logit_kl" in row for row in rows)
    assert ckpt["metrics"]["lens"]["tokens"] == ckpt["metrics"]["tokens"]  # --lens-tokens 0: every position
    assert rows[-1]["logit_kl"] == pytest.approx(0, abs=1e-6)  # the logit lens at the last layer is the model
    model = lm_from_checkpoint(ckpt)  # the tuned lens it lacks is the identity: the logit lens
    assert not model.has_tuned_lens and model.lens == "logit"
    r = invoke("depth", tmp_path / "logit.pt", "--samples", "100")
    assert r.exit_code == 0, r.output
    assert "tuned_p_max reads the logit lens" in " ".join(r.output.split())
    assert invoke("info", tmp_path / "none.pt").exit_code == 0


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--lens", "bogus"], "--lens"),
        (["--lens-sample", "-1"], "--lens-sample"),
        (["--lens-sample", "many"], "--lens-sample"),
        (["--lens-tokens", "-5"], "--lens-tokens"),
    ],
)
def test_bad_lens_options_are_one_line(lm_dir, tmp_path, extra, fragment):
    out = tmp_path / "x.pt"
    assert_user_error(invoke(*_train_args(lm_dir, out, *extra)), fragment)
    assert not out.exists()


def test_lens_options_apply_to_language_models_only(tmp_path):
    r = invoke("train", "--backbone", "mlp", "--dataset", "fashion_mnist", "--lens", "logit", "--out", tmp_path / "c")
    assert_user_error(r, "--lens", "--task lm")


@pytest.mark.parametrize("ablation", ["mean", "zero"])
def test_the_heads_removal_passes_are_the_plain_ones(lm, ablation):
    """LayaLMHead.removed_logits (each layer's translation computed once) gives lolo_effects the plain passes' Δ."""
    from laya_cli.auditing.metrics import lolo_effects, target_probability

    laya, _ = _heads(lm)
    g = torch.Generator().manual_seed(2)
    feats = [torch.randn(6, 32, generator=g) for _ in range(lm.num_layers)]
    reference = [torch.randn(32, generator=g) for _ in range(lm.num_layers)]
    target = torch.randint(0, lm.readout.vocabulary, (6,), generator=g)
    got = lolo_effects(laya, feats, target, reference, ablation)
    base = target_probability(laya(feats).logits, target)
    for i in range(lm.num_layers):
        fill = torch.zeros(6, 32) if ablation == "zero" else reference[i].expand(6, -1)
        p = target_probability(laya([*feats[:i], fill, *feats[i + 1 :]]).logits, target)
        torch.testing.assert_close(got[:, i], base - p, rtol=1e-5, atol=1e-7)


def test_the_fused_kl_keeps_float32_precision_at_a_large_vocabulary():
    """At 49,152 logits of ±30 (SmolLM2's), the fused KL is within float32's reach of the float64 definition, and a
    reading equal to the model's own has KL 0 (a float32 batched mat-vec there was off by ~5e-3 nats)."""
    g = torch.Generator().manual_seed(4)
    final, other = torch.randn(4, 49152, generator=g) * 8, torch.randn(4, 49152, generator=g) * 8
    ref = lm_heads.Reference.of(final)
    kl, _ = lm_heads.kl_and_ce(torch.stack([final, other], 1), ref, torch.zeros(4, dtype=torch.long))
    exact = lm_heads.kl_to(torch.log_softmax(final.double(), -1), other.double())
    assert kl[:, 0].abs().max() < 1e-4
    torch.testing.assert_close(kl[:, 1].double(), exact, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("terms", [False, True])
def test_a_cell_times_train_lm_beside_the_forward_in_wall_and_cpu_seconds(tmp_path, capsys, terms):
    from benchmarks import lm_cost
    from benchmarks.synthetic import sentences

    texts = sentences(120)
    corpus = lm_cost.write_corpus(tmp_path, texts[:100], texts[100:])
    model = lm_cost.build_model(tmp_path, texts[:100], layers=2, width=16, vocab=512, block=16)
    argv = ["--cell", "--model", str(model), "--corpus", str(corpus), "--block-size", "16", "--eval-tokens", "60",
            *(["--terms"] if terms else [])]  # fmt: skip
    assert lm_cost.main(argv) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["train"] > 0 and len(got["forward"]) == len(got["cpu_forward"]) == 2 and got["tokens"] > 0
    assert got["ratio"] == pytest.approx(got["train"] / (sum(got["forward"]) / 2))
    assert got["cpu_ratio"] == pytest.approx(got["cpu_train"] / (sum(got["cpu_forward"]) / 2))
    assert (got["align"] > 0 and got["exit_aware"] > 0) == terms  # --terms: the defaults' terms, else both off


@pytest.mark.parametrize("args", [["--cell"], ["--cell", "--model", "/no/such/model", "--corpus", "."]])
def test_a_cell_without_its_folders_is_one_line_and_exit_2(args, capsys):
    from benchmarks.lm_cost import parse

    with pytest.raises(SystemExit) as e:
        parse(args)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("python -m benchmarks.lm_cost: error: --cell")
