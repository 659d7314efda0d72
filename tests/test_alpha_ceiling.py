"""benchmarks.alpha_ceiling: the probes that bound how faithful any head reading the pooled taps can be. Its
faithfulness is the audit's Spearman (checked against scipy), a probe follows effects its inputs determine (and the
best static order does not), and its effects are the network scope's, batch by batch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from scipy.stats import spearmanr

from benchmarks.alpha_ceiling import effects_of, faithfulness, fit_probe


def test_faithfulness_is_the_mean_spearman_over_rows_where_both_vary():
    g = torch.Generator().manual_seed(0)
    scores, delta = torch.randn(50, 5, generator=g), torch.randn(50, 5, generator=g)
    delta[3] = 0.2  # a row whose effects do not vary: undefined, left out
    want = [spearmanr(scores[i], delta[i]).statistic for i in range(50) if i != 3]
    assert faithfulness(scores, delta) == pytest.approx(sum(want) / len(want), abs=1e-9)


def test_a_probe_follows_effects_its_inputs_determine_where_a_static_order_cannot():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(800, 6, generator=g)
    delta = x[:, :4] * torch.tensor([1.0, 0.5, -1.0, 2.0])  # each sample's order of 4 layers set by its inputs
    train, test = slice(0, 600), slice(600, 800)
    probe = fit_probe(x[train], delta[train], None, seed=0, steps=1000)
    with torch.no_grad():
        learnt = faithfulness(probe(x[test]), delta[test])
    static = faithfulness(delta[train].mean(0).expand_as(delta[test]), delta[test])
    assert learnt > 0.9
    assert abs(static) < 0.2


def test_its_effects_are_the_network_scopes_batch_by_batch(tmp_path):
    """``effects_of`` in batches of 2 gives each row's pooled taps, ŷ and bypass effects as one pass of
    ``NetworkScope.effects`` over all the rows."""
    transformers = pytest.importorskip("transformers")
    from laya_cli import backbones as bb
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.backbones import tokenizers as tokenization
    from laya_cli.model.heads import build_head

    texts = ["dog cat", "bread cheese apple rice soup", "saw", "fish lion tiger bear wolf", "milk egg"]
    config = transformers.BertConfig(
        hidden_size=32, vocab_size=200, max_position_embeddings=64, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=64,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path / "bert")
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{tmp_path / 'bert'}", pretrained=True, max_length=12)).eval()
    tokenization.train_tokenizer(backbone.input_cfg, " ".join(texts).split() * 3, "test words")
    x = tokenization.encode(backbone.input_cfg, texts)
    with torch.no_grad():
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()

    feats, target, delta = effects_of(SimpleNamespace(backbone=backbone, head=head), x, batch_size=2)
    scope = NetworkScope(backbone, head, None, ablation="bypass")
    hs = scope.activations(x)
    want_feats = scope.pooled(hs)
    want_target = head(want_feats).logits.argmax(-1)
    torch.testing.assert_close(target, want_target)
    for got, want in zip(feats, want_feats):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(delta, scope.effects(x, hs, want_feats, want_target), rtol=0, atol=1e-5)
    assert delta.abs().max() > 1e-4  # the blocks' removals move p_ŷ: the comparison is not of zeros
