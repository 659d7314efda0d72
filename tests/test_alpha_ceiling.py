"""benchmarks.alpha_ceiling: the probes that bound how faithful any head reading the pooled taps can be. Its
faithfulness is the audit's Spearman (checked against scipy), a probe follows effects its inputs determine (and the
best static order does not), and its effects are the network scope's, batch by batch; the unpooled probe's positions
are the taps laya pools (padding masked out, maps capped at 8×8) and its attention never reads a masked position."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from scipy.stats import spearmanr

from benchmarks.alpha_ceiling import (
    AttentionPoolProbe,
    effects_of,
    faithfulness,
    fit_probe,
    padded,
    pooled_taps,
    unpooled_tap,
)


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

    feats, target, delta, positions = effects_of(
        SimpleNamespace(backbone=backbone, head=head), x, batch_size=2, unpooled=True
    )
    scope = NetworkScope(backbone, head, None, ablation="bypass")
    hs = scope.activations(x)
    want_feats = scope.pooled(hs)
    want_target = head(want_feats).logits.argmax(-1)
    torch.testing.assert_close(target, want_target)
    for got, want in zip(feats, want_feats):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(delta, scope.effects(x, hs, want_feats, want_target), rtol=0, atol=1e-5)
    assert delta.abs().max() > 1e-4  # the blocks' removals move p_ŷ: the comparison is not of zeros

    # the unpooled taps: every real token of each tap (texts cut per batch, padded back); this model pools the
    # first token, and each text's real tokens are as many as the whole pass's mask says
    real = backbone.adapter.batch_mask(hs[0]).sum(1)
    assert backbone.pool == "cls" and len(set(real.tolist())) > 1
    for (tokens, mask), h, r in zip(positions, hs, want_feats):
        assert tokens.shape == (len(texts), h.shape[1], h.shape[2]) and mask.shape == tokens.shape[:2]
        assert mask.sum(1).tolist() == real.tolist()
        torch.testing.assert_close(tokens[:, 0].float(), r, rtol=0, atol=2e-2)  # float16 positions
        torch.testing.assert_close(tokens[mask].float(), h[mask], rtol=0, atol=2e-2)


def test_a_cnn_maps_positions_are_capped_and_a_vector_is_one_position():
    backbone = SimpleNamespace(
        tap_format=lambda i, h: SimpleNamespace(layout=("NCHW", "NCHW", "NHWC", "NC")[i]),
        adapter=SimpleNamespace(batch_mask=lambda h: None),
    )
    g = torch.Generator().manual_seed(0)
    big, small = torch.randn(2, 5, 16, 16, generator=g), torch.randn(2, 5, 4, 4, generator=g)
    tokens, mask = unpooled_tap(backbone, 0, big)
    assert tokens.shape == (2, 64, 5) and mask.all()
    torch.testing.assert_close(tokens[:, 0].float(), big[:, :, :2, :2].mean((2, 3)), rtol=0, atol=1e-2)
    assert unpooled_tap(backbone, 1, small)[0].shape == (2, 16, 5)
    nhwc, _ = unpooled_tap(backbone, 2, small.permute(0, 2, 3, 1))
    torch.testing.assert_close(nhwc, unpooled_tap(backbone, 1, small)[0])
    assert unpooled_tap(backbone, 3, torch.randn(2, 7))[0].shape == (2, 1, 7)


def test_the_attention_probe_reads_no_masked_position_and_starts_as_the_masked_mean():
    g = torch.Generator().manual_seed(0)
    short = (torch.randn(3, 2, 8, generator=g).half(), torch.ones(3, 2, dtype=torch.bool))
    long = (torch.randn(2, 5, 8, generator=g).half(), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]).bool())
    tokens, mask = padded([short, long])
    assert tokens.shape == (5, 5, 8) and mask.sum(1).tolist() == [2, 2, 2, 3, 5]
    taps = [(tokens.float(), mask), (torch.randn(5, 4, 6, generator=g), torch.ones(5, 4, dtype=torch.bool))]
    torch.manual_seed(0)
    probe = AttentionPoolProbe([8, 6], layers=3).eval()
    with torch.no_grad():
        probe.queries.normal_()
        scores = probe(taps)
        assert scores.shape == (5, 3)
        w = probe.weights(0, *taps[0])
        assert (w[~mask] == 0).all() and torch.allclose(w.sum(1), torch.ones(5))
        noisy = [(taps[0][0].masked_fill(~mask.unsqueeze(-1), 1e3), mask), taps[1]]
        torch.testing.assert_close(probe(noisy), scores)  # what sits at a masked position changes nothing
        probe.queries.zero_()
        mean = (taps[0][0] * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        torch.testing.assert_close(torch.einsum("bp,bpd->bd", probe.weights(0, *taps[0]), taps[0][0]), mean)


def test_the_attention_probe_learns_effects_set_by_one_position():
    """Each row's order of 3 layers is written at a position that moves from row to row (the others are noise):
    a mean over positions dilutes it, a query that finds it follows it."""
    g = torch.Generator().manual_seed(2)
    n, p, d = 600, 6, 4
    tokens = torch.randn(n, p, d, generator=g) * 0.3
    where = torch.randint(p, (n,), generator=g)
    marked = torch.randn(n, d, generator=g)
    marked[:, 3] = 4.0  # the channel that lets a query find the position
    tokens[torch.arange(n), where] = marked
    delta = marked[:, :3]
    taps = [(tokens.half(), torch.ones(n, p, dtype=torch.bool))]
    train = [(tokens[:450].half(), taps[0][1][:450])]
    probe = fit_probe(train, delta[:450], None, 0, 400, lambda: AttentionPoolProbe([d], 3))
    with torch.no_grad():
        learnt = faithfulness(probe([(tokens[450:], taps[0][1][450:])]), delta[450:])
    assert learnt > 0.8


def test_the_pooled_probes_read_a_positions_heads_pooled_taps_only():
    """A ``--alpha-reader positions`` head's rows carry each tap's positions after r_i: the pooled probes get r_i."""
    from laya_cli.backbones.pooling import pack_positions
    from laya_cli.model.heads import HeadSettings, build_head

    g = torch.Generator().manual_seed(0)
    r = [torch.randn(5, 4, generator=g), torch.randn(5, 6, generator=g)]
    packed = [pack_positions(x, torch.randn(5, 3, x.shape[1], generator=g), torch.ones(5, 3)) for x in r]
    head = build_head("laya", [4, 6], 3, HeadSettings(alpha_reader="positions", d_star=8, score_hidden=16))
    for got, want in zip(pooled_taps(head, packed), r):
        torch.testing.assert_close(got, want)
    assert pooled_taps(build_head("laya", [4, 6], 3), r) == r  # a pooled head's rows are r_i already
