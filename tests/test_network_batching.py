"""Issue 73, network scope: the batch's work in fewer operations gives the numbers of the loops it replaced, bit for
bit: the L removals' suffixes stacked along the batch (``NetworkScope._stacked_removed_taps``), every method's ρ,
tie flags and Deletion@1 in one set of kernels instead of one per method."""

from __future__ import annotations

import pytest
import torch
from helpers import make_backbone

from laya_cli.auditing.job import run_scoped_audit
from laya_cli.auditing.metrics import Faithfulness, degenerate_effects, deletion_at_1, spearman_rows, tie_undefined
from laya_cli.auditing.names import parse_methods
from laya_cli.auditing.network import batches, patching
from laya_cli.auditing.network.patching import NetworkScope
from laya_cli.auditing.settings import AuditSettings
from laya_cli.features.extraction import tap_means
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.heads import build_head
from laya_cli.model.laya_model import load_model


def _loop_score_methods(run, b, scored, crossed, rows) -> Faithfulness:
    """The per-method loop ``batches._score_methods`` replaced (main before issue 73's third round), on the scores
    the batch made (``scored``: on the host since the fourth round; ``crossed``: the head's own, where made), and
    Δ's own flags as ``network_batch`` made them before the sixth round."""
    s, delta = run.plan.settings, b.delta
    for m, a in scored.items():
        rho = spearman_rows(a, delta, s.tie_tol)
        rows["rho"].append({m: rho})
        rows["tie"].append({m: tie_undefined(rho, spearman_rows(a, delta), delta, s.tie_tol)})
        rows["d1"].append({m: deletion_at_1(a, delta, s.tie_tol)[0]})
        if m in crossed:
            rows["cross"].append({m: spearman_rows(crossed[m].cpu(), a)})
    _, oracle, random = deletion_at_1(delta, delta)
    exactly = degenerate_effects(delta)
    return Faithfulness(None, None, None, degenerate_effects(delta, s.tie_tol), exactly, oracle, random)


def _without_memory(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("memory", "seconds", "time")}


@pytest.mark.parametrize("tie_tol", [0.0, 1e-4])
def test_network_batch_equals_the_per_method_loop_bit_for_bit(digits_ckpt, monkeypatch, tie_tol):
    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=37)  # a last partial batch too
    methods = parse_methods("all")
    settings = AuditSettings(steps=4, batch_size=16, tie_tol=tie_tol, metrics="all").validate()
    staircase, calls = NetworkScope._staircase, []
    monkeypatch.setattr(NetworkScope, "_staircase", lambda self, hs: calls.append(1) or staircase(self, hs))
    new = run_scoped_audit(model, data, methods, settings, "both").to_dict()
    stacked = len(calls)
    assert stacked, "the full batches' removals ran stacked"
    with monkeypatch.context() as patched:  # the loops: one pass per removal, one set of metrics per method
        patched.setattr(batches, "_score_methods", _loop_score_methods)
        patched.setattr(patching, "STACK_MIN_ROWS", 10**9)
        old = run_scoped_audit(model, data, methods, settings, "both").to_dict()
    assert len(calls) == stacked, "the loops ran no staircase"
    assert _without_memory(new) == _without_memory(old)
    assert new["network"]["methods"]  # the comparison is about something


@pytest.mark.parametrize("name,side", [("mlp", 8), ("cnn", 16)])
@pytest.mark.parametrize("ablation", ["mean", "zero"])
@pytest.mark.parametrize("rows", [3, 16])
def test_stacked_removals_equal_one_pass_per_layer_bit_for_bit(name, side, ablation, rows):
    """The L removals' suffixes as one staircase of stacked rows give the taps the loop of L patched passes gives."""
    backbone = make_backbone(name, side)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(rows, *backbone.example_shape, generator=g)
    with torch.no_grad():
        mean = tap_means(backbone, torch.rand(16, *backbone.example_shape, generator=g))
        dims = [h.shape[-1] for h in backbone(x)]
    scope = NetworkScope(backbone, build_head("laya", dims, 5).eval(), mean if ablation == "mean" else None)
    hs = scope.activations(x)
    loop = scope.removed_taps(x, hs)  # stack_rows 0: one pass per layer
    scope.stack_rows = len(hs) * rows  # exactly fits: stacked where each tap has enough matrix rows
    stacks = min(h.numel() // h.shape[-1] for h in hs) >= patching.STACK_MIN_ROWS
    staircase = scope._stacked_removed_taps
    calls = []
    scope._stacked_removed_taps = lambda hs: calls.append(1) or staircase(hs)
    stacked = scope.removed_taps(x, hs)
    assert len(calls) == stacks
    assert [len(r) for r in stacked] == [len(r) for r in loop] == list(range(len(hs), 0, -1))
    for a, b in zip(loop, stacked):
        for u, v in zip(a, b):
            assert torch.equal(u, v)
    scope.stack_rows -= 1  # one row over the plan: the loop again
    scope.removed_taps(x, hs)
    assert len(calls) == stacks


@pytest.mark.parametrize("rows", [12, 16, 33])
def test_stacked_removal_effects_equal_the_head_passes_bit_for_bit(rows):
    """Δ from one head pass of (L + 1)·B rows equals Δ from the L + 1 head passes, where the batch stacks."""
    backbone = make_backbone("mlp", 8)
    g = torch.Generator().manual_seed(2)
    x = torch.rand(rows, *backbone.example_shape, generator=g)
    with torch.no_grad():
        mean = tap_means(backbone, torch.rand(16, *backbone.example_shape, generator=g))
        dims = [h.shape[-1] for h in backbone(x)]
    scope = NetworkScope(backbone, build_head("laya", dims, 5).eval(), mean)
    hs = scope.activations(x)
    feats, removed = scope.pooled(hs), scope.removed_taps(x, hs)
    target = torch.randint(0, 5, (rows,), generator=g)
    loop = patching.removal_effects(scope.head, feats, removed, target)
    assert loop.shape == (rows, len(hs)) and loop.abs().sum() > 0
    assert torch.equal(patching.stacked_removal_effects(scope.head, feats, removed, target), loop)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
@pytest.mark.parametrize("apart", [False, True])
def test_staircase_effects_equal_the_removals_split_first(monkeypatch, name, apart):
    """Δ from the staircase's steps as they are stacked (``staircase_effects``, what ``effects`` runs on a chain that
    stacks) equals Δ from the removals split by removal first (``stacked_removal_effects``) and from the L + 1 head
    passes; each step pooled at once or removal by removal (``apart``)."""
    net, x = _image_scope(name, "mean")
    net.stack_rows = 10**6
    monkeypatch.setattr(patching, "_pools_stacked", (lambda *a: False) if apart else patching._pools_stacked)
    hs = net.activations(x)
    assert net._stacks(hs)
    feats, target = net.pooled(hs), torch.arange(len(x)) % 5
    steps = net._staircase(hs)
    assert [len(p) for p in steps] == ([j + 1 for j in range(len(hs))] if apart else [1] * len(hs))
    split = patching.stacked_removal_effects(net.head, feats, net._stacked_removed_taps(hs), target)
    assert torch.equal(patching.staircase_effects(net.head, feats, steps, target), split)
    assert torch.equal(split, patching.removal_effects(net.head, feats, net._stacked_removed_taps(hs), target))
    calls = []
    monkeypatch.setattr(patching, "stacked_removal_effects", lambda *a: calls.append(1))
    assert torch.equal(net.effects(x, hs, feats, target), split) and not calls


@pytest.mark.parametrize("scope", ["network", "both"])
def test_the_estimates_probe_is_the_audits_first_batch(digits_ckpt, monkeypatch, scope):
    """``laya audit``'s estimate probes the first batch whole on a light backbone: the audit takes its rows instead of
    computing the batch again, with the same numbers, ``random``'s later draws included, as when it does."""
    from laya_cli.auditing import job

    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=37)  # batches of 16, 16 and 5
    settings = AuditSettings(steps=4, batch_size=16).validate()
    calls, network_batch = [], batches.network_batch
    monkeypatch.setattr(
        batches, "network_batch", lambda run, i, xb, rows: calls.append(i) or network_batch(run, i, xb, rows)
    )
    reused = run_scoped_audit(model, data, parse_methods("all"), settings, scope).to_dict()
    assert calls == [0, 16, 32], "the probe ran the first batch, the audit the others"
    calls.clear()
    probe = job.probe_batch
    monkeypatch.setattr(job, "probe_batch", lambda run, xb: (probe(run, xb), setattr(run, "probed", None)))
    again = run_scoped_audit(model, data, parse_methods("all"), settings, scope).to_dict()
    assert calls == [0, 0, 16, 32], "without the probe's rows the audit runs every batch"
    assert _without_memory(reused) == _without_memory(again)
    assert (
        reused["network"]["methods"]["random"]["faithfulness"] == again["network"]["methods"]["random"]["faithfulness"]
    )


def _two_passes(net: NetworkScope, x, labels):
    """The batch's work before issue 73's fifth round: the taps without gradients, the head on them, ŷ, then Captum's
    layer gradients in a forward of their own; the removals' taps pooled removal by removal."""
    hs = net.activations(x)
    inputs = list(net.inputs)
    with torch.no_grad():
        feats = net.pooled(hs)
        out = net.head(feats)
    target = out.logits.argmax(-1) if labels is None else labels
    grads = net.layer_gradients(x, target, multiply=False)
    return hs, inputs, feats, out, target, grads


def _assert_equal_lists(a, b, what: str) -> None:
    assert len(a) == len(b), what
    for u, v in zip(a, b):
        assert (u is None and v is None) or torch.equal(u, v), what


def _bert_scope(tmp_path, ablation):
    """A tiny BERT from its config (frozen, a replaying engine: token ids, so its embeddings' output requires grad) on
    five texts of different lengths (padding masked out of the mean pooling), a seeded head, its NetworkScope."""
    transformers = pytest.importorskip("transformers")
    from laya_cli import backbones as bb
    from laya_cli.backbones import tokenizers as tokenization

    config = transformers.BertConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path / "bert")
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{tmp_path / 'bert'}", pretrained=True, max_length=12)).eval()
    texts = ["dog cat", "bread cheese apple rice soup", "saw", "fish lion tiger bear wolf", "milk egg"]
    tokenization.train_tokenizer(backbone.input_cfg, " ".join(texts).split() * 3, "test words")
    x = tokenization.encode(backbone.input_cfg, texts)
    with torch.no_grad():
        mean = tap_means(backbone, x)
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()
    return NetworkScope(backbone, head, mean if ablation == "mean" else None, ablation=ablation), x


def _image_scope(name, ablation, rows=16):
    backbone = make_backbone(name, 8 if name == "mlp" else 16)
    g = torch.Generator().manual_seed(3)
    x = torch.rand(rows, *backbone.example_shape, generator=g)
    with torch.no_grad():
        mean = tap_means(backbone, x)
        dims = [h.shape[-1] for h in backbone(x)]
    torch.manual_seed(5)
    return NetworkScope(backbone, build_head("laya", dims, 5).eval(), mean if ablation == "mean" else None), x


@pytest.mark.parametrize(
    "name,ablation", [("mlp", "mean"), ("mlp", "zero"), ("cnn", "mean"), ("bert", "zero"), ("bert", "bypass")]
)
@pytest.mark.parametrize("target", ["predicted", "label"])
def test_one_forward_gives_the_two_passes_taps_and_gradients_bit_for_bit(tmp_path, monkeypatch, name, ablation, target):
    """The batch's taps (and a bypass's inputs), r_i, the head's output, ŷ and Captum's layer gradients from the one
    forward Captum runs (``taps_and_gradients``) equal the plain pass's and those of Captum's own pass; Δ after it
    (the staircase pooled once per step) equals Δ after the plain pass (the staircase pooled removal by removal)."""
    net, x = _bert_scope(tmp_path, ablation) if name == "bert" else _image_scope(name, ablation)
    net.stack_rows = 10**6
    assert net.one_pass
    labels = None if target == "predicted" else torch.arange(len(x)) % 3
    hs, inputs, feats, out, pred, grads = _two_passes(net, x, labels)
    assert net._stacks(hs), "the removals run as a staircase"
    with monkeypatch.context() as apart:
        apart.setattr(patching, "_pools_stacked", lambda *a: False)
        delta = net.effects(x, hs, feats, pred)
    one = net.taps_and_gradients(x, labels)
    assert len(net.inputs) == (len(hs) if ablation == "bypass" else 0)
    _assert_equal_lists(one.hs, hs, "taps")
    _assert_equal_lists(net.inputs, inputs, "the taps' inputs")
    _assert_equal_lists(one.feats, feats, "r_i")
    _assert_equal_lists(list(one.out), list(out), "the head's output")
    assert torch.equal(one.target, pred)
    _assert_equal_lists(one.grads, grads, "layer gradients")
    assert not any(t.requires_grad for t in [*one.hs, *one.feats, one.out.logits, *one.grads])
    assert sum(g.abs().sum() for g in grads) > 0 and delta.abs().sum() > 0
    assert torch.equal(net.effects(x, one.hs, one.feats, one.target), delta)


@pytest.mark.parametrize("scope", ["network", "both"])
@pytest.mark.parametrize("target,ablation", [("predicted", "mean"), ("label", "zero")])
def test_audit_with_one_forward_per_batch_equals_the_two_passes(digits_ckpt, monkeypatch, scope, target, ablation):
    """A network-scope audit of every method gives the same numbers whether its batches run one forward (the taps from
    Captum's pass) or two (a plain pass, then Captum's): the route ``NetworkScope.one_pass`` picks is the one run."""
    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=37)
    settings = AuditSettings(steps=4, batch_size=16, target=target, ablation=ablation, metrics="all").validate()
    one_pass, layer_gradients = NetworkScope.taps_and_gradients, NetworkScope.layer_gradients
    calls = []
    monkeypatch.setattr(NetworkScope, "taps_and_gradients", lambda *a: calls.append("one") or one_pass(*a))
    monkeypatch.setattr(
        NetworkScope, "layer_gradients", lambda *a, **k: calls.append("two") or layer_gradients(*a, **k)
    )
    new = run_scoped_audit(model, data, parse_methods("all"), settings, scope).to_dict()
    assert calls == ["one"] * 3, "each batch: one forward"
    calls.clear()
    with monkeypatch.context() as patched:
        patched.setattr(NetworkScope, "one_pass", False)
        patched.setattr(patching, "_pools_stacked", lambda *a: False)
        old = run_scoped_audit(model, data, parse_methods("all"), settings, scope).to_dict()
    assert calls == ["two"] * 3, "each batch: its plain pass and Captum's"
    assert _without_memory(new) == _without_memory(old)
    assert new["network"]["methods"]["atp"]["faithfulness"]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_staircase_pooled_once_per_step_equals_pooling_each_removal(monkeypatch, name):
    """The staircase's stacked rows pooled at once and split give each removal's pooled taps bit for bit (a mean over
    a CNN's positions too, on the CPU)."""
    net, x = _image_scope(name, "mean")
    net.stack_rows = 10**6
    hs = net.activations(x)
    pools, calls = patching._pools_stacked, []
    monkeypatch.setattr(patching, "_pools_stacked", lambda *a: calls.append(1) or pools(*a))
    once = net._stacked_removed_taps(hs)
    assert len(calls) == len(hs)
    monkeypatch.setattr(patching, "_pools_stacked", lambda *a: False)
    apart = net._stacked_removed_taps(hs)
    for a, b in zip(once, apart):
        _assert_equal_lists(a, b, "pooled removals")


@pytest.mark.parametrize("target", ["predicted", "label"])
def test_one_forward_on_a_single_row(target):
    """A last batch of one image: Captum selects its target by a column index there, the one forward by a gather of
    one row; the same layer gradients."""
    net, x = _image_scope("cnn", "mean", rows=1)
    labels = None if target == "predicted" else torch.tensor([3])
    hs, _, feats, out, pred, grads = _two_passes(net, x, labels)
    one = net.taps_and_gradients(x, labels)
    _assert_equal_lists(one.hs, hs, "taps")
    assert torch.equal(one.target, pred)
    _assert_equal_lists(one.grads, grads, "layer gradients")


@pytest.mark.parametrize("name,ablation", [("cnn", "mean"), ("bert", "bypass"), ("bert", "zero")])
def test_gradient_scores_and_effects_equal_the_copying_route(tmp_path, monkeypatch, name, ablation):
    """Issue 73, sixth round: a bypass's fill read where it lies (no copy of the kept inputs), the gradient methods'
    per-layer sums taken without ``flatten``'s view and Δ from the staircase's steps unsplit give the numbers of the
    route before (each fill a copy, each attribution flattened, the staircase split by removal), bit for bit."""
    from laya_cli.auditing import registry
    from laya_cli.auditing.methods import REDUCTIONS
    from laya_cli.auditing.network import methods as network_methods

    net, x = _bert_scope(tmp_path, ablation) if name == "bert" else _image_scope(name, ablation)
    net.stack_rows = 10**6
    one = net.taps_and_gradients(x)
    assert net._stacks(one.hs)
    parts = [registry._gradxact_part, registry._atp_part, registry._saliency_part]

    def scores_and_effects(effects):
        scores = [net.from_gradients(part, one.hs, one.grads) for part in parts]
        return scores, effects(x, one.hs, one.feats, one.target)

    new, delta = scores_and_effects(net.effects)
    fill = NetworkScope.fill
    monkeypatch.setattr(NetworkScope, "fill", lambda self, i, h, rows=None, copy=False: fill(self, i, h, rows, True))
    monkeypatch.setattr(network_methods, "_reduced_rows", lambda a, reduce: REDUCTIONS[reduce](a.flatten(1)))
    before = patching.stacked_removal_effects if len(x) >= patching.STACK_MIN_ROWS else patching.removal_effects
    old, old_delta = scores_and_effects(lambda x, hs, feats, t: before(net.head, feats, net.removed_taps(x, hs), t))
    _assert_equal_lists(new, old, "gradient methods' scores")
    assert torch.equal(delta, old_delta) and delta.abs().sum() > 0
    assert all(s.abs().sum() > 0 for s in new)
    if ablation == "bypass":
        kept = net.inputs
        net.taps_and_gradients(x)
        _assert_equal_lists(kept, net.inputs, "the kept inputs, untouched by the removals that read them")


@pytest.mark.parametrize("shape", [(32, 197, 192), (16, 8, 7, 5), (5, 12, 32)])
def test_reduced_rows_equal_the_flattened_sum(shape):
    """A contiguous attribution's per-row sum over its trailing dimensions equals the sum of its rows flattened, bit
    for bit; a non-contiguous one is flattened as before."""
    from laya_cli.auditing.network.methods import _reduced_rows

    g = torch.Generator().manual_seed(4)
    a = torch.randn(*shape, generator=g) * torch.rand(*shape, generator=g) * 1e3
    assert torch.equal(_reduced_rows(a, "sum"), a.flatten(1).sum(-1))
    t = a.transpose(1, 2)
    assert torch.equal(_reduced_rows(t, "sum"), t.flatten(1).sum(-1))
    assert torch.equal(_reduced_rows(a, "l2"), a.flatten(1).norm(dim=-1))


@pytest.mark.parametrize("scope", ["network", "both"])
def test_laya_at_network_scope_takes_the_batchs_alpha(digits_ckpt, monkeypatch, scope):
    """laya's network-scope scores are the α of the batch's own forward (no head pass of its own): the audit's numbers
    those of laya's head pass again (``AttributionContext.alpha`` forgotten)."""
    from laya_cli.auditing import methods as audit_methods

    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=37)
    settings = AuditSettings(steps=4, batch_size=16, metrics="all").validate()
    methods = parse_methods("laya,gradxact,atp,random")
    calls, attention = [], audit_methods.laya_attention
    monkeypatch.setattr(audit_methods, "laya_attention", lambda *a: calls.append(1) or attention(*a))
    new = run_scoped_audit(model, data, methods, settings, scope).to_dict()
    known = len(calls)
    batch = batches._batch

    def forgetting(*args):
        b, y, out = batch(*args)
        assert torch.equal(b.ctx.alpha, attention(model.head, b.feats))
        b.ctx.alpha = None
        return b, y, out

    monkeypatch.setattr(batches, "_batch", forgetting)
    old = run_scoped_audit(model, data, methods, settings, scope).to_dict()
    assert len(calls) - known >= 3, "laya's own head pass, batch by batch"
    assert _without_memory(new) == _without_memory(old)
    assert new["network"]["methods"]["laya"]["faithfulness"]
