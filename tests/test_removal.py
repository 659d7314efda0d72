"""Removing a layer the way residual networks allow (network scope, --ablation bypass | mean-update): a block's
output := its input is the model run without that block, checked against an independent forward of a copy whose
layer list lacks it; mean-update adds the training mean of the block's update, checked against transformers' own
hidden_states; and the command line's refusals."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import assert_user_error, invoke

from laya_cli import backbones as bb
from laya_cli.auditing.network.patching import NetworkScope
from laya_cli.backbones import tokenizers as tokenization
from laya_cli.backbones.engines import first_tensor
from laya_cli.features.extraction import tap_means, tap_updates
from laya_cli.model.heads import build_head
from laya_cli.runtime.errors import LayaError

transformers = pytest.importorskip("transformers")

SMALL = dict(num_hidden_layers=4, num_attention_heads=2, intermediate_size=64)
TINY = dict(vocab_size=200, max_position_embeddings=64)
CONFIGS = {  # each with the attribute path of its list of layers
    "bert": (lambda: transformers.BertConfig(hidden_size=32, **TINY, **SMALL), "encoder.layer"),
    "gpt2": (lambda: transformers.GPT2Config(vocab_size=200, n_embd=32, n_layer=4, n_head=2, n_positions=64), "h"),
    "llama": (lambda: transformers.LlamaConfig(hidden_size=32, num_key_value_heads=1, **TINY, **SMALL), "layers"),
}
TEXTS = ["dog cat", "bread cheese apple rice soup", "saw", "fish lion tiger bear wolf", "milk egg"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("removal")
    for name, (config, _) in CONFIGS.items():
        torch.manual_seed(0)
        transformers.AutoModel.from_config(config()).save_pretrained(root / name)
    return root


def scoped(folder, name, ablation, reference=None):
    """A frozen tapped model, a seeded head on its taps, a NetworkScope removing by ``ablation``, and a batch."""
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{folder / name}", pretrained=True, max_length=12)).eval()
    tokenization.train_tokenizer(backbone.input_cfg, " ".join(TEXTS).split() * 3, "test words")
    x = tokenization.encode(backbone.input_cfg, TEXTS)
    with torch.no_grad():
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()
    return backbone, head, NetworkScope(backbone, head, reference, ablation=ablation), x


def stream_without(model: torch.nn.Module, layers: str, drop, inputs: dict) -> list[torch.Tensor]:
    """An independent forward of a copy of ``model`` whose layer list lacks the layers in ``drop``: the residual
    stream as it enters the first kept layer, then after each kept layer."""
    model = copy.deepcopy(model)
    *parent, last = layers.split(".")
    owner = model.get_submodule(".".join(parent)) if parent else model
    kept = torch.nn.ModuleList([m for j, m in enumerate(getattr(owner, last)) if j not in drop])
    setattr(owner, last, kept)
    stream = []

    def entering(module, args, kwargs):
        stream.append(first_tensor(args[0] if args else kwargs["hidden_states"]))

    kept[0].register_forward_pre_hook(entering, with_kwargs=True)
    for layer in kept:
        layer.register_forward_hook(lambda m, args, out: stream.append(first_tensor(out)))
    with torch.no_grad():
        model(**inputs, use_cache=False)
    return stream


def taps_without(stream: list[torch.Tensor], n_layers: int, drop) -> list[torch.Tensor]:
    """The original taps in a model without ``drop``: tap j is the stream after the kept layers up to j (a dropped
    tap: what enters it, unchanged)."""
    return [stream[sum(1 for m in range(j + 1) if m not in drop)] for j in range(n_layers)]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("i", [0, 2, 3])
def test_bypass_is_the_model_run_without_the_layer(folders, name, i):
    backbone, head, scope, x = scoped(folders, name, "bypass")
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    base = scope.probs(feats).gather(1, target[:, None]).squeeze(1)
    effects = scope.effects(x, hs, feats, target)

    inputs = backbone.adapter(x)  # the same token batch (cut after its longest text) the scope ran
    taps = taps_without(stream_without(backbone.model, CONFIGS[name][1], {i}, inputs), len(hs), {i})
    removed = scope.probs([backbone.pool_tap(j, h) for j, h in enumerate(taps)]).gather(1, target[:, None]).squeeze(1)
    torch.testing.assert_close(effects[:, i], base - removed, rtol=0, atol=1e-5)
    assert (taps[-1] - hs[-1]).abs().max() > 1e-2  # removing the layer changes the last tap: the check is not vacuous


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_the_network_targets_cached_bypassed_taps_are_the_model_run_without_the_block(folders, name):
    """--align-target network on a frozen backbone caches, per block i, the pooled taps i..L with block i bypassed
    (training/network_target.py:frozen_removals): each equals an independent forward of a copy without the block."""
    from laya_cli.training.network_target import frozen_removals

    backbone, _, scope, x = scoped(folders, name, "bypass")
    n = len(backbone.layer_names)
    removed = frozen_removals(scope, x, "cpu", batch_size=2)  # batched otherwise than one pass over x
    inputs = backbone.adapter(x)
    for i in range(n):
        taps = taps_without(stream_without(backbone.model, CONFIGS[name][1], {i}, inputs), n, {i})
        want = [backbone.pool_tap(j, taps[j]) for j in range(i, n)]
        assert len(removed[i]) == len(want)
        for got, tap in zip(removed[i], want):
            torch.testing.assert_close(got, tap, rtol=0, atol=1e-5)


def test_mean_update_adds_the_training_mean_of_each_block_update(folders):
    """The mean update of layer i is the mean of hidden_states[i+1] − hidden_states[i] (transformers' own, per
    position over the training texts); its removal puts the input plus it in place of the output."""
    backbone, head, _, x = scoped(folders, "bert", "bypass")
    train = tokenization.encode(backbone.input_cfg, ["dog", "cat bread", "apple rice soup cake", "axe saw"])
    updates = tap_means(backbone, train, of=tap_updates)
    with torch.no_grad(), backbone.full_length():
        states = backbone.model(**backbone.adapter(train), output_hidden_states=True).hidden_states
    for i, mean in enumerate(updates):
        torch.testing.assert_close(mean, (states[i + 1] - states[i]).mean(0), rtol=0, atol=1e-5)

    scope = NetworkScope(backbone, head, updates, ablation="mean-update")
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    effects = scope.effects(x, hs, feats, target)
    _, inputs = backbone.activations_and_inputs(x)
    full = NetworkScope(backbone, head, None, prefix=False)  # a plain replacing hook, written out here
    for i in (0, 3):
        patch = lambda out, i=i: inputs[i] + updates[i][: out.shape[1]]
        later = backbone.patched_activations(x, i, patch=patch)
        p = full.probs(full.pooled(later)).gather(1, target[:, None]).squeeze(1)
        base = full.probs(feats).gather(1, target[:, None]).squeeze(1)
        torch.testing.assert_close(effects[:, i], base - p, rtol=0, atol=1e-5)


def test_network_ig_under_bypass_adds_up_to_the_bypass_effects(folders):
    """IG's layer baseline is the block's input: its attributions add up to the bypass effect (completeness),
    on the prefix-cached route and on full passes alike."""
    backbone, head, scope, x = scoped(folders, "gpt2", "bypass")
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    effects = scope.effects(x, hs, feats, target)
    ours = scope.integrated_gradients(x, hs, feats, target, n_steps=64)
    full = NetworkScope(backbone, head, None, prefix=False, ablation="bypass")
    full.activations(x)
    theirs = full.integrated_gradients(x, hs, feats, target, n_steps=8)
    torch.testing.assert_close(ours.sum(0), effects.sum(0), rtol=0, atol=2e-3)
    torch.testing.assert_close(scope.integrated_gradients(x, hs, feats, target, n_steps=8), theirs, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def trained(folders, tmp_path_factory):
    import csv
    import random

    root = tmp_path_factory.mktemp("trained")
    words = {"a": "dog cat horse bird fish".split(), "b": "bread cheese apple rice soup".split()}
    rng = random.Random(0)
    with open(root / "t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for _ in range(80):
            label = rng.choice("ab")
            w.writerow([" ".join(rng.choices(words[label], k=4)), label])
    out = root / "m.pt"
    r = invoke("train", "--backbone", f"hf:{folders / 'bert'}", "--dataset", f"csv:{root / 't.csv'}",
               "--max-length", "12", "--epochs", "1", "--out", out, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("ablation", ["bypass", "mean-update"])
def test_laya_audit_says_which_removal_ran(trained, tmp_path, ablation):
    out = tmp_path / "a.json"
    r = invoke("audit", trained, "--scope", "both", "--ablation", ablation, "--compare", "ig,gradxact",
               "--samples", "12", "--json", out, "--ci", "0")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["network"]["reference"] == ablation and doc["settings"]["ablation"] == "mean"  # the head: by mean
    caption = " ".join(r.output.split())  # the table's caption, however the terminal wraps it
    assert ("its input (the block skipped)" if ablation == "bypass" else "the training mean of its update") in caption


def test_removals_that_need_a_network_are_refused_elsewhere(trained):
    assert_user_error(
        # --scope head said: a network-question model's audit takes a network removal alone to mean network scope
        invoke("audit", trained, "--scope", "head", "--ablation", "bypass", "--samples", "8"),
        "removes a block inside the network",
    )
    assert_user_error(invoke("audit", trained, "--scope", "network", "--ablation", "skip"), "--ablation")


def test_a_block_that_changes_shape_cannot_be_bypassed_nor_dropped(tmp_path):
    out = tmp_path / "mlp.pt"
    assert invoke("train", "--dataset", "digits", "--epochs", "1", "--out", out, "-q").exit_code == 0
    assert_user_error(
        invoke("audit", out, "--scope", "network", "--ablation", "bypass", "--samples", "8"),
        "needs a block whose output has its input's shape",
    )
    assert_user_error(
        invoke("depth", out, "--drop", "1", "--out", tmp_path / "small.pt"), "dropping layers (--drop) needs blocks"
    )
    assert not (tmp_path / "small.pt").exists()


def test_attribution_patching_is_the_gradient_times_the_removal_at_both_scopes(folders):
    """AtP: (activation − the removal's reference) ⊙ ∂p_ŷ/∂activation, against autograd written out here: at the
    head (r̄ as reference) and inside the network (bypass: the block's input; the total derivative)."""
    from laya_cli.auditing.methods import attribution_patching

    backbone, head, scope, x = scoped(folders, "bert", "bypass")
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    rows = torch.arange(len(target))

    leaves = [f.detach().clone().requires_grad_() for f in feats]
    reference = [f.mean(0).detach() for f in feats]
    grads = torch.autograd.grad(scope.probs(leaves)[rows, target].sum(), leaves)
    want = torch.stack([((f - r) * g).sum(-1) for f, r, g in zip(feats, reference, grads)], dim=1)
    torch.testing.assert_close(attribution_patching(head, feats, target, reference), want, rtol=0, atol=1e-6)

    ours = scope.attribution_patching(x, hs, target)
    for i in (0, 2):
        leaf = hs[i].detach().clone().requires_grad_()
        later = backbone.patched_activations(x, i, leaf)
        (g,) = torch.autograd.grad(scope.probs(scope.pooled(later))[rows, target].sum(), leaf)
        _, inputs = backbone.activations_and_inputs(x)
        torch.testing.assert_close(ours[:, i], ((hs[i] - inputs[i]) * g).flatten(1).sum(-1), rtol=0, atol=1e-6)


def test_laya_audit_compares_atp_at_both_scopes(trained, tmp_path):
    out = tmp_path / "a.json"
    r = invoke("audit", trained, "--scope", "both", "--ablation", "bypass", "--compare", "atp",
               "--samples", "12", "--json", out, "--ci", "0")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["methods"]["atp"]["available"] and doc["network"]["methods"]["atp"]["available"]


def test_laya_diff_removes_by_bypass_at_network_scope(trained, tmp_path):
    out = tmp_path / "d.json"
    r = invoke("diff", trained, trained, "--scope", "network", "--ablation", "bypass", "--samples", "12",
               "--permutations", "20", "--json", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["ablation"] == "bypass" and doc["settings"]["scope"] == "network"
    assert "network scope (bypass removal)" in " ".join(r.output.split())
    head_scope = invoke("diff", trained, trained, "--ablation", "bypass", "--samples", "12")
    assert_user_error(head_scope, "removes a block inside the network")


@pytest.mark.parametrize("drop", [{1}, {0, 2}, {1, 2, 3}])
def test_dropping_layers_is_the_model_run_without_them(folders, drop):
    backbone, head, scope, x = scoped(folders, "llama", "bypass")
    ours = backbone.bypassed_activations(x, drop)
    theirs = taps_without(stream_without(backbone.model, CONFIGS["llama"][1], drop, backbone.adapter(x)), 4, drop)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_the_drop_table_scores_every_order_on_the_test_split(trained):
    from laya_cli.depthing.drop_orders import drop_table
    from laya_cli.model.evaldata import model_dataset
    from laya_cli.model.laya_model import load_model

    model = load_model(trained)
    _, data = model_dataset(model)
    val, test = (data.val.images, data.val.labels), (data.test.images, data.test.labels)
    table = drop_table(model, val, test, k=2, draws=2)
    assert set(table["orders"]) == {
        "alpha",
        "block-influence",
        "network",
        "reverse",
        "greedy",
        "random 1",
        "random 2",
    }
    assert all(3 not in o for o in table["orders"].values())  # the last tap stays
    assert table["orders"]["reverse"] == [2, 1, 0]  # the deepest droppable layer first
    rows = {(r["order"], r["k"]): r for r in table["rows"]}
    full = rows[("alpha", 0)]["accuracy"]
    assert all(rows[(name, 0)]["accuracy"] == full for name in table["orders"])  # nothing dropped: the model
    one = table["orders"]["network"][0]  # dropping one layer is its bypass: the same predictions as the audit's patch
    want = (dropped := rows[("network", 1)])["accuracy"]
    assert dropped["dropped"] == [one] and 0 <= dropped["ci_low"] <= want <= dropped["ci_high"] <= 1


# --------------------------------------------------------------------------- laya depth --drop: a model without them


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_dropped_backbone_is_the_model_without_those_layers_and_holds_none_of_their_weights(folders, name):
    backbone, _, _, x = scoped(folders, name, "bypass")
    layers, drop = CONFIGS[name][1], {0, 2}
    small = backbone.dropped(drop)
    with torch.no_grad():
        got = small.activations(x)
    want = taps_without(stream_without(backbone.model, layers, drop, backbone.adapter(x)), 4, drop)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    keys = small.model.state_dict()
    assert not any(k.startswith((f"{layers}.0.", f"{layers}.2.")) for k in keys)
    assert any(k.startswith(f"{layers}.1.") for k in keys)
    assert len(backbone.model.state_dict()) > len(keys)  # the original is untouched


def test_a_layer_shared_across_depth_cannot_be_dropped_alone(folders):
    backbone, *_ = scoped(folders, "bert", "bypass")
    backbone.layer_names = [f"encoder.layer.0#{i}" for i in range(4)]  # as ALBERT's taps are named
    with pytest.raises(LayaError, match="shared across depth"):
        backbone.dropped([1])


def test_laya_depth_drop_writes_a_checkpoint_that_info_audit_export_and_truncate_read(trained, tmp_path):
    small, table = tmp_path / "small.pt", tmp_path / "drop.json"
    r = invoke("depth", trained, "--drop", "2", "--draws", "1", "--drop-order", "greedy", "--time-repeats", "1",
               "--out", small, "--json", table, "--markdown", tmp_path / "drop.md")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(table.read_text())
    orders = {"alpha", "block-influence", "network", "reverse", "greedy", "random 1"}
    assert {row["order"] for row in doc["rows"]} == orders
    assert [t["k"] for t in doc["timing"]] == [0, 1, 2] and doc["timing"][0]["flops_fraction"] == 1.0
    assert doc["timing"][2]["flops_fraction"] < doc["timing"][1]["flops_fraction"] < 1  # measured, not assumed
    written = doc["written"]
    assert written["dropped"] == sorted(doc["orders"]["greedy"][:2])
    # the written model, run for real without its layers, predicts what the table's bypass scored
    assert written["test_accuracy"] == written["table_accuracy"]
    from laya_cli.model.laya_model import load_model

    model = load_model(small)
    assert (
        model.spec.dropped == written["dropped"]
        and model.checkpoint["metrics"]["test_accuracy"] == (written["test_accuracy"])
    )
    # the full model's α collapse summary is not this model's (its later taps read other streams now)
    assert load_model(trained).checkpoint["metrics"]["alpha_collapse"] is not None
    assert model.checkpoint["metrics"]["alpha_collapse"] is None
    assert "dropped" in " ".join(invoke("info", small).output.split())
    # one timing round is no measured speed-up (issue 48): said so, with the FLOPs ratio; info does not repeat it
    said = " ".join(r.output.split())
    assert "a single timing round" in said and "not a measured speed-up" in said and "fewer FLOPs" in said
    assert "faster" not in said and "faster" not in invoke("info", small).output
    assert written["timing_rounds"] == 1 and written["speedup_interval"] is None
    audit = invoke("audit", small, "--scope", "both", "--ablation", "bypass", "--samples", "8", "--ci", "0")
    assert audit.exit_code == 0, audit.output
    assert invoke("export", small, "--samples", "8", "--out", tmp_path / "exp").exit_code == 0
    cut = invoke("depth", small, "--truncate", "2", "--out", tmp_path / "cut.pt")
    assert cut.exit_code == 0, cut.output
    assert load_model(tmp_path / "cut.pt").spec.dropped == [i for i in written["dropped"] if i < 2]
    again = invoke("depth", small, "--drop", "1", "--draws", "0", "--time-repeats", "0", "--json", tmp_path / "b.json")
    assert again.exit_code == 0, again.output  # what is gone is not offered again
    orders = json.loads((tmp_path / "b.json").read_text())["orders"]
    assert all(not set(o) & set(written["dropped"]) for o in orders.values())


def test_laya_depth_drop_refuses_bad_input_in_one_line_and_writes_nothing(trained, tmp_path):
    out = tmp_path / "small.pt"
    assert_user_error(invoke("depth", trained, "--drop", "0", "--out", out), "--drop must be at least 1")
    assert_user_error(invoke("depth", trained, "--drop", "4", "--out", out), "at most 3 of this model's 4 layers")
    assert_user_error(invoke("depth", trained, "--drop", "1", "--truncate", "2", "--out", out), "--drop")
    assert_user_error(invoke("depth", trained, "--drop", "1", "--drop-order", "alhpa"), "did you mean alpha")
    assert_user_error(invoke("depth", trained, "--drop", "1", "--plot", tmp_path / "p.png"), "--plot")
    assert_user_error(invoke("depth", trained, "--out", out), "--truncate K or --drop K")
    assert not out.exists() and not (tmp_path / "p.png").exists()


def test_a_speed_up_is_called_measured_only_when_its_interval_excludes_1():
    """Issue 64: '1.97× faster measured' with its range 0.85–3.93× on the last line only. A speed-up is the median of
    full ÷ dropped round by round; measured where the median's interval excludes 1, otherwise said to be noise."""
    from laya_cli.depthing.drop_table import timing_row
    from laya_cli.report.drop import speed_text, speedup_cell

    clear = timing_row([2.0, 2.1, 1.9, 2.0, 2.05], [1.0, 1.02, 0.98, 1.0, 1.01], 1)
    assert clear["speedup_verdict"] == "faster" and clear["speedup"] == pytest.approx(2.0, abs=0.05)
    assert clear["speedup_interval"][0] > 1 and speedup_cell(clear).startswith("2.0")
    busy = timing_row([2.0, 1.0, 4.0, 1.5, 0.9], [1.0, 1.2, 1.0, 2.0, 1.0], 1)  # a busy machine: rounds all over
    assert busy["speedup_verdict"] == "noisy" and speedup_cell(busy).startswith("noisy (")
    wide = timing_row([2.0, 3.0, 6.0, 2.5, 2.2], [1.0, 1.0, 1.0, 1.0, 1.0], 1)  # faster, but 2–6×: no one number
    assert wide["speedup_verdict"] == "faster, noisy" and speedup_cell(wide) == "faster (2.00–6.00)"
    w_wide = {**wide, "timing_rounds": 5, "flops_fraction": 0.5, "flops_speedup": 2.0}
    assert "faster measured, too noisy for one ratio: full ÷ dropped 2.00–6.00×" in speed_text(w_wide)
    same = timing_row([1.0, 1.01, 0.99, 1.0, 1.0], [1.0, 1.0, 1.0, 1.01, 0.99], 1)
    assert same["speedup_verdict"] == "same" and speedup_cell(same).startswith("none (")
    assert timing_row([2.0, 2.2], [1.0, 1.0], 1)["speedup_interval"] is None  # two rounds: no interval
    w = {"speedup": 2.0, "timing_rounds": 5, "speedup_interval": [1.8, 2.2], "speedup_verdict": "faster",
         "flops_fraction": 0.5, "flops_speedup": 2}  # fmt: skip
    assert speed_text(w) == ", 2.00× faster measured (median of 5 rounds; full ÷ dropped 1.80–2.20×)"
    w.update(speedup_interval=[0.85, 3.93], speedup_verdict="noisy")
    said = speed_text(w)
    assert "faster" not in said and "too noisy to tell (0.85–3.93× over 5 rounds)" in said and "fewer FLOPs" in said
    old = {"speedup": 2.0, "timing_rounds": 5, "speedup_spread": [0.85, 3.93], "flops_fraction": 0.5}
    assert "too noisy to tell" in speed_text(old)  # a checkpoint written before: read off its spread
    w.update(timing_rounds=2, speedup_interval=None, speedup_verdict="single")
    assert speed_text(w).startswith(", 2.00× fewer FLOPs (2 timing rounds: 2.00×, not a measured speed-up")
