"""Layers that run time first (sequence × batch × width: XLNet's, FSMT's encoder's): laya finds them by their
outputs transposed (``hf.layer_taps``), holds every tap batch first, and writes what it patches or replays back in
the layer's own layout. Checked against the model itself: taps against its own hidden states, a bypassed layer's
network-scope effect against an independent forward of a copy without that layer, truncation against the full
model's taps, prefix caching against full patched passes; and the command line from train to depth."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import invoke

from laya_cli import backbones as bb
from laya_cli.auditing.network.patching import NetworkScope
from laya_cli.backbones import tokenizers as tokenization
from laya_cli.backbones.engines import first_tensor, time_first
from laya_cli.features.extraction import tap_means
from laya_cli.model.heads import build_head

transformers = pytest.importorskip("transformers")

CONFIGS = {  # each with the attribute path of its list of layers
    "xlnet": (lambda: transformers.XLNetConfig(vocab_size=200, d_model=32, n_layer=4, n_head=2, d_inner=64), "layer"),
    "fsmt": (
        lambda: transformers.FSMTConfig(
            langs=["en", "de"],
            src_vocab_size=200,
            tgt_vocab_size=200,
            d_model=32,
            encoder_layers=4,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
        ),  # fmt: skip
        "encoder.layers",
    ),
}
TEXTS = ["dog cat", "bread cheese apple rice soup", "saw", "fish lion tiger bear wolf", "milk egg"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("time_first")
    for name, (config, _) in CONFIGS.items():
        torch.manual_seed(0)
        transformers.AutoModel.from_config(config()).save_pretrained(root / name)
    return root


def scoped(folder, name, ablation="mean", reference=None, prefix=None):
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{folder / name}", pretrained=True, max_length=12)).eval()
    tokenization.train_tokenizer(backbone.input_cfg, " ".join(TEXTS).split() * 3, "test words")
    x = tokenization.encode(backbone.input_cfg, TEXTS)
    with torch.no_grad():
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()
    return backbone, head, NetworkScope(backbone, head, reference, ablation=ablation, prefix=prefix), x


def own_states(backbone, x) -> list[torch.Tensor]:
    with torch.no_grad():
        out = backbone.model(**backbone.adapter(x), output_hidden_states=True)
    return list(getattr(out, "encoder_hidden_states", None) or out.hidden_states)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_time_first_layers_are_tapped_batch_first(folders, name):
    backbone, _, _, x = scoped(folders, name)
    layers = CONFIGS[name][1]
    assert backbone.layer_names == [f"{layers}.{i}" for i in range(4)]
    assert time_first(backbone.model) == set(backbone.layer_names)
    hs = backbone.activations(x)
    states = own_states(backbone, x)
    assert hs[0].shape[0] == len(TEXTS) and hs[0].shape[1] != len(TEXTS)  # B×L×D, not L×B×D
    for h, want in zip(hs, states[1:]):
        torch.testing.assert_close(h, want, rtol=0, atol=1e-6)


def stream_without(model: torch.nn.Module, layers: str, drop, inputs: dict) -> list[torch.Tensor]:
    """An independent forward of a copy of ``model`` whose layer list lacks ``drop``: the stream entering the first
    kept layer, then after each kept layer — time first as the layers run, laid out batch first here."""
    model = copy.deepcopy(model)
    *parent, last = layers.split(".")
    owner = model.get_submodule(".".join(parent)) if parent else model
    kept = torch.nn.ModuleList([m for j, m in enumerate(getattr(owner, last)) if j not in drop])
    setattr(owner, last, kept)
    stream = []
    kept[0].register_forward_pre_hook(lambda m, args: stream.append(first_tensor(args[0]).transpose(0, 1)))
    for layer in kept:
        layer.register_forward_hook(lambda m, args, out: stream.append(first_tensor(out).transpose(0, 1)))
    with torch.no_grad():
        model(**inputs, use_cache=False)
    return stream


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("i", [0, 2])
def test_bypass_of_a_time_first_layer_is_the_model_run_without_it(folders, name, i):
    backbone, head, scope, x = scoped(folders, name, "bypass")
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    base = scope.probs(feats).gather(1, target[:, None]).squeeze(1)
    effects = scope.effects(x, hs, feats, target)
    stream = stream_without(backbone.model, CONFIGS[name][1], {i}, backbone.adapter(x))
    taps = [stream[sum(1 for m in range(j + 1) if m != i)] for j in range(len(hs))]
    removed = scope.probs([backbone.pool_tap(j, h) for j, h in enumerate(taps)]).gather(1, target[:, None]).squeeze(1)
    torch.testing.assert_close(effects[:, i], base - removed, rtol=0, atol=1e-5)
    assert (taps[-1] - hs[-1]).abs().max() > 1e-2  # not vacuous


@pytest.mark.parametrize("name", list(CONFIGS))
def test_network_scope_and_truncation_of_time_first_layers(folders, name):
    """FSMT's layers are re-called from a tap (prefix caching: their masks are batch first); XLNet's take tables laid
    out by position before the batch (its attention mask: L×L×B), which Captum's stacked copies cannot repeat: it
    runs full patched passes instead."""
    backbone, head, _, x = scoped(folders, name)
    train = tokenization.encode(backbone.input_cfg, ["dog", "cat bread", "apple rice soup cake"])
    assert backbone.can_continue == (name == "fsmt")
    scope = NetworkScope(backbone, head, tap_means(backbone, train), prefix=backbone.can_continue)
    full = NetworkScope(backbone, head, scope.reference, prefix=False)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    torch.testing.assert_close(
        scope.effects(x, hs, feats, target), full.effects(x, hs, feats, target), rtol=0, atol=1e-6
    )
    ours = scope.integrated_gradients(x, hs, feats, target, n_steps=8)
    torch.testing.assert_close(ours, full.integrated_gradients(x, hs, feats, target, n_steps=8), rtol=0, atol=1e-5)
    assert ours.abs().sum() > 0
    cut = backbone.truncated(2)
    assert len(getattr(cut.model, CONFIGS[name][1].split(".")[-1], None) or cut.model.encoder.layers) == 2
    with torch.no_grad():
        got = cut.activations(x)
    for h, want in zip(got, own_states(backbone, x)[1:3]):
        torch.testing.assert_close(h, want, rtol=0, atol=1e-6)


def test_train_audit_depth_on_time_first_layers(folders, tmp_path):
    import csv
    import random

    rng, words = random.Random(0), {"a": "dog cat horse bird".split(), "b": "bread cheese apple rice".split()}
    with open(tmp_path / "t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for _ in range(60):
            label = rng.choice("ab")
            w.writerow([" ".join(rng.choices(words[label], k=4)), label])
    out, small = tmp_path / "m.pt", tmp_path / "small.pt"
    r = invoke("train", "--backbone", f"hf:{folders / 'xlnet'}", "--dataset", f"csv:{tmp_path / 't.csv'}",
               "--max-length", "12", "--epochs", "1", "--out", out, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    r = invoke("audit", out, "--scope", "both", "--ablation", "bypass", "--compare", "ig,gradxact",
               "--samples", "12", "--json", tmp_path / "a.json", "--ci", "0")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "a.json").read_text())["network"]["methods"]["ig"]["faithfulness"] is not None
    r = invoke("depth", out, "--samples", "12", "--truncate", "2", "--out", small)
    assert r.exit_code == 0, r.output
    assert invoke("audit", small, "--samples", "12", "-q").exit_code == 0
