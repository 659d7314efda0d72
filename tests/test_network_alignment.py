"""--align with the network target (training/network_target.py): its Δ is the network-scope audit's, training with
it runs both routes and records it, and a bad target is one line."""

from __future__ import annotations

import pytest
import torch

from laya_cli.auditing.job import run_scoped_audit
from laya_cli.auditing.network.patching import NetworkScope, removal_effects
from laya_cli.auditing.network.reference import network_reference
from laya_cli.auditing.settings import AuditSettings
from laya_cli.data.settings import DataSettings
from laya_cli.features.extraction import to_float_images
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.laya_model import load_model
from laya_cli.runtime import progress
from laya_cli.runtime.errors import LayaError
from laya_cli.training.alignment import alignment_loss
from laya_cli.training.job import train
from laya_cli.training.network_target import (
    NetworkAlignment,
    cached_rows,
    frozen_removals,
    resolved_removal,
)
from laya_cli.training.settings import TrainingSettings, TrainJobSettings


def _batch(model, n=48):
    data = load_eval_data(model, samples=n)
    x = to_float_images(data.images)
    return data, x


def test_the_frozen_cache_gives_the_network_audits_effects(digits_ckpt):
    """Removals cached once (frozen backbone) + L + 1 head passes = NetworkScope.effects, the audit's per-batch Δ;
    their mean over the samples = the audit's own mean Δᴺ per layer (``--scope both``)."""
    model = load_model(digits_ckpt)
    data, x = _batch(model)
    reference = network_reference(model, "mean")
    net = NetworkScope(model.backbone.eval(), model.head.eval(), reference, ablation="mean")
    hs = net.activations(x)
    feats = net.pooled(hs)
    target = model.head(feats).logits.argmax(-1)
    removed = frozen_removals(net, data.images, "cpu", batch_size=20)  # another batching than the audit's
    assert [len(r) for r in removed] == [3, 2, 1] and len(removed[0][0]) == len(x)
    cached = removal_effects(model.head, feats, removed, target)
    torch.testing.assert_close(cached, net.effects(x, hs, feats, target), rtol=0, atol=1e-6)
    audit = run_scoped_audit(model, data, ["laya"], AuditSettings(batch_size=16), "both").network
    means = [audit.comparison.layers[name]["delta_network"] for name in model.layer_names]
    torch.testing.assert_close(cached.double().mean(0), torch.tensor(means, dtype=torch.float64), rtol=0, atol=1e-6)


def test_cached_rows_are_a_seeded_share_of_about_subset_rows_a_batch():
    rows = cached_rows(1000, 128, seed=3, subset=32)
    assert len(rows) == 250 and torch.equal(rows, rows.sort().values) and len(set(rows.tolist())) == 250
    assert torch.equal(rows, cached_rows(1000, 128, 3, 32)) and not torch.equal(rows, cached_rows(1000, 128, 4, 32))
    assert len(cached_rows(1000, 128, seed=3)) == 125  # the default: 16 rows a batch
    assert torch.equal(cached_rows(10, 16, seed=0), torch.arange(10))  # a batch no larger than the subset: all rows
    assert len(cached_rows(3, 1024, seed=0)) == 1  # never none


def test_the_frozen_term_reads_only_the_cached_rows_of_a_batch(digits_ckpt):
    """A cache of some rows: the term on a batch is the term on that batch's cached rows, whatever the others."""
    model = load_model(digits_ckpt)
    data, x = _batch(model, 24)
    net = NetworkScope(model.backbone.eval(), model.head.eval(), network_reference(model, "mean"), ablation="mean")
    feats = net.pooled(net.activations(x))
    logits = model.head(feats).logits
    full = NetworkAlignment(1.0, net, frozen_removals(net, data.images, "cpu"))
    rows = torch.tensor([2, 5, 11, 17])
    part = NetworkAlignment(1.0, net, frozen_removals(net, data.images[rows], "cpu"), rows=rows)
    batch = torch.tensor([17, 0, 5, 9, 23])  # rows 17 and 5 cached
    got = part.loss(model.head, [f[batch] for f in feats], logits[batch], rows=batch)
    only = torch.tensor([17, 5])
    want = full.loss(model.head, [f[only] for f in feats], logits[only], rows=only)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    none = torch.tensor([0, 1, 23])
    assert part.loss(model.head, [f[none] for f in feats], logits[none], rows=none).item() == 0.0


@pytest.mark.parametrize("fit", ["rank", "distill", "both"])
def test_the_frozen_target_is_a_constant_of_the_term(digits_ckpt, fit):
    """The cached effects are the target α is fitted to (``removal_effects`` runs without gradients): the term's
    gradient is the one with Δᴺ detached, never through the head's outputs on the removed taps (which would move
    the effects towards α)."""
    model = load_model(digits_ckpt)
    data, x = _batch(model, 16)
    net = NetworkScope(model.backbone.eval(), model.head.eval(), network_reference(model, "mean"), ablation="mean")
    feats = [f.detach() for f in net.pooled(net.activations(x))]
    removed = frozen_removals(net, data.images, "cpu")
    rows = torch.arange(16)
    logits = model.head(feats).logits
    term = NetworkAlignment(1.0, net, removed, rows=rows, loss=fit)
    head = model.head
    grads = torch.autograd.grad(term.loss(head, feats, logits, rows=rows), list(head.parameters()), allow_unused=True)
    with torch.no_grad():
        delta = removal_effects(head, feats, removed, logits.argmax(-1))
    want = alignment_loss(head, feats, logits.argmax(-1), None, "scorer", delta=delta, loss=fit)
    wants = torch.autograd.grad(want, list(head.parameters()), allow_unused=True)
    for g, w in zip(grads, wants):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w, rtol=0, atol=1e-7)


def test_the_end_to_end_target_is_the_audits_effects_on_its_rows(digits_ckpt):
    model = load_model(digits_ckpt)
    _, x = _batch(model, 40)
    for removal, reference in (("zero", None), ("mean", None)):
        net = NetworkScope(model.backbone, model.head, reference, ablation=removal)
        term = NetworkAlignment(1.0, net, subset=32)
        model.backbone.train(), model.head.train()
        feats, target, delta = term.end_to_end_effects(model.head, x)
        assert model.backbone.training and model.head.training  # the modes are given back
        ref = None if removal == "zero" else [h.mean(0) for h in model.backbone.eval().activations(x)]
        audit = NetworkScope(model.backbone.eval(), model.head.eval(), ref, ablation=removal)
        hs = audit.activations(x)
        torch.testing.assert_close(delta, audit.effects(x, hs, audit.pooled(hs), target), rtol=0, atol=1e-6)
    assert resolved_removal(model.backbone) == "mean"  # the mlp's blocks change width: no bypass


def _train(tmp_path, name, align=1.0, finetune=None, epochs=2, **keywords):
    req = TrainJobSettings(
        data=DataSettings("digits", seed=0),
        train=TrainingSettings(epochs=epochs, seed=0, patience=epochs, align=align, **keywords),
        finetune=finetune,
        out=str(tmp_path / f"{name}.pt"),
    )
    with progress.enabled(False):
        return train(req.validate())


@pytest.mark.parametrize("finetune", [None, False], ids=["end-to-end", "frozen"])
def test_training_with_the_network_target_runs_and_is_recorded(tmp_path, finetune):
    net = _train(tmp_path, "net", finetune=finetune, align_target="network")
    head = _train(tmp_path, "head", finetune=finetune, align_target="head")
    assert net["train_config"]["align_target"] == "network" and net["train_config"]["align_removal"] == "mean"
    assert head["train_config"]["align_target"] == "head" and head["train_config"]["align_removal"] == "auto"
    assert any(not torch.equal(v, head["head"]["weights"][k]) for k, v in net["head"]["weights"].items())
    assert net["metrics"]["test_accuracy"] > 0.3
    model = load_model(tmp_path / "net.pt")
    data = load_eval_data(model, samples=32)
    result = run_scoped_audit(model, data, ["laya", "atp"], AuditSettings(), "network")
    assert result.network.methods["laya"].defined > 0


def test_the_both_target_is_the_network_term_plus_the_heads_own(digits_ckpt):
    """``align_target="both"``: on one batch, the network term (cached removals) + the head's own term (its
    leave-one-layer-out effects under r̄), λ each: the sum of the two terms built alone, gradients too."""
    from laya_cli.training.alignment import Alignment

    model = load_model(digits_ckpt)
    data, x = _batch(model, 16)
    net = NetworkScope(model.backbone.eval(), model.head.eval(), network_reference(model, "mean"), ablation="mean")
    feats = [f.detach() for f in net.pooled(net.activations(x))]
    removed, rows, head = frozen_removals(net, data.images, "cpu"), torch.arange(16), model.head
    logits = head(feats).logits
    reference = [f.mean(0) for f in feats]
    both = NetworkAlignment(0.5, net, removed, rows=rows)
    both.head_term = Alignment(0.5, reference)
    alone = NetworkAlignment(0.5, net, removed, rows=rows).loss(head, feats, logits, rows=rows)
    own = Alignment(0.5, reference).loss(head, feats, logits)
    got = both.loss(head, feats, logits, rows=rows)
    assert own.item() > 0 and alone.item() > 0
    torch.testing.assert_close(got, alone + own, rtol=0, atol=1e-7)
    params = [p for p in head.parameters() if p.requires_grad]
    g = torch.autograd.grad(got, params, allow_unused=True)
    w = torch.autograd.grad(alone + own, params, allow_unused=True)
    for a, b in zip(g, w):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    state = both.state_dict()  # --resume keeps the head term's running mean (end to end) beside the network's
    assert "head_term" in state
    again = NetworkAlignment(0.5, net, removed, rows=rows)
    again.head_term = Alignment(0.5)
    again.load_state_dict({**state, "head_term": {"reference": reference}})
    assert all(torch.equal(a, b) for a, b in zip(again.head_term.reference, reference))


@pytest.mark.parametrize("finetune", [None, False], ids=["end-to-end", "frozen"])
def test_training_with_both_targets_runs_and_is_recorded(tmp_path, finetune):
    both = _train(tmp_path, "both", finetune=finetune, align_target="both", epochs=2)
    net = _train(tmp_path, "net", finetune=finetune, align_target="network", epochs=2)
    assert both["train_config"]["align_target"] == "both" and both["train_config"]["align_removal"] == "mean"
    assert any(not torch.equal(v, net["head"]["weights"][k]) for k, v in both["head"]["weights"].items())
    assert both["metrics"]["alpha_collapse"]["trained_against"] == "both"


@pytest.mark.parametrize(
    "keywords, fragment",
    [
        ({"align_target": "everything"}, "--align-target"),
        ({"align_target": "network", "align": 0.0}, "--align-target network says what --align trains"),
        ({"align_target": "both", "align": 0.0}, "--align-target both says what --align trains"),
        ({"align_target": "network", "align_removal": "bypass"}, "needs a block whose output has its input's shape"),
    ],
)
def test_a_bad_target_is_one_line(tmp_path, keywords, fragment):
    align = keywords.pop("align", 1.0)
    with pytest.raises(LayaError, match=fragment) as e:
        _train(tmp_path, "bad", align=align, epochs=1, **keywords)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "bad.pt").exists()


def _frozen_network(tmp_path, name, **keywords):
    return _train(tmp_path, name, finetune=False, epochs=1, align_target="network", batch_size=64, **keywords)


def test_the_frozen_network_target_on_a_store_trains_the_in_memory_head(tmp_path, monkeypatch):
    """Features in the sharded store (LAYA_IN_MEMORY_MB=0): the batches carry their training rows, so the term reads
    the cached removals of the very rows in the batch: the head of the in-memory run with the same options (to
    1e-6, as a plain store run; --batch-size 64: a 1-in-4 share of the rows cached, so the row lookup matters: the
    batches' rows reversed fail this test)."""

    memory = _frozen_network(tmp_path, "memory")
    monkeypatch.setenv("LAYA_IN_MEMORY_MB", "0")
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    stored = _frozen_network(tmp_path, "stored")
    assert len(list((tmp_path / "cache").glob("*.store"))) == 3  # train, val, test
    assert (stored["train_config"]["align"], stored["train_config"]["align_target"]) == (1.0, "network")
    assert stored["train_config"]["align_removal"] == "mean" and "align_dropped" not in stored["train_config"]
    for k, w in memory["head"]["weights"].items():
        torch.testing.assert_close(stored["head"]["weights"][k], w, rtol=0, atol=1e-6, msg=k)
    assert stored["metrics"]["test_accuracy"] == memory["metrics"]["test_accuracy"]


def test_a_capped_cache_keeps_the_first_rows_of_the_same_seeded_draw():
    full = cached_rows(1000, 128, seed=3)
    capped = cached_rows(1000, 128, seed=3, limit=40)
    assert len(capped) == 40 and set(capped.tolist()) <= set(full.tolist())
    assert torch.equal(capped, cached_rows(1000, 128, seed=3, limit=40))  # deterministic
    assert torch.equal(cached_rows(1000, 128, seed=3, limit=10**6), full)  # a cap above the share changes nothing
    assert len(cached_rows(1000, 128, seed=3, limit=0)) == 1  # never none
    every = cached_rows(10, 16, seed=0, limit=4)  # a batch no larger than the subset: a seeded 4 of all rows
    assert len(every) == 4 and torch.equal(every, every.sort().values)


def test_a_cache_past_the_in_memory_budget_is_capped_in_one_line(tmp_path, monkeypatch):
    from helpers import invoke

    from laya_cli.training.network_target import removal_row_mib

    monkeypatch.setenv("LAYA_IN_MEMORY_MB", "0.1")  # the features in the store; the cache capped to fit 0.1 MiB
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "m.pt"
    r = invoke("train", "--dataset", "digits", "--frozen", "--epochs", "1", "--seed", "0", "--align", "1",
               "--align-target", "network", "--out", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    cfg = torch.load(out, weights_only=False)["train_config"]
    keep = int(0.1 // removal_row_mib(torch.load(out, weights_only=False)["dims"]))
    lines = [line for line in r.output.splitlines() if line.startswith("network alignment target")]
    assert len(lines) == 1 and "exceed the in-memory budget (LAYA_IN_MEMORY_MB=0.1)" in lines[0], r.output
    assert f"caching them for {keep} of 1295 rows" in lines[0] and 1 < keep < 162, lines[0]  # 162: the 16-a-batch share
    assert (cfg["align"], cfg["align_target"]) == (1.0, "network")
