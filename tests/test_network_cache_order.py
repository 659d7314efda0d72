"""The frozen network term's cache (``network_target.frozen_removals``) runs texts as the extraction does — from the
shortest to the longest, each batch cut to its own longest — and gives every row back at its place; images run as
they are given."""

from __future__ import annotations

import pytest
import torch
from helpers import make_backbone

from laya_cli.auditing.network.patching import NetworkScope
from laya_cli.features.extraction import tap_means
from laya_cli.model.heads import build_head
from laya_cli.training.network_target import frozen_removals

# lengths 2, 6, 1, 9, 3, 5, 1, 4: the given order is not the length order, and two texts tie
TEXTS = [
    "dog cat",
    "bread cheese apple rice soup milk",
    "saw",
    "fish lion tiger bear wolf dog cat egg rice",
    "milk egg soup",
    "apple bread fish lion tiger",
    "bear",
    "wolf saw cheese milk",
]


def _seen(net: NetworkScope) -> list[tuple[torch.Tensor, int | None]]:
    """The batches the scope's pass is given, as they come, each with the positions the model computed (a text
    model's: its adapter's cut; None for images)."""
    seen, activations = [], net.activations

    def recorded(x):
        hs = activations(x)
        mask = getattr(getattr(net.backbone, "adapter", None), "mask", None)
        seen.append((x.clone(), None if mask is None else mask.shape[1]))
        return hs

    net.activations = recorded
    return seen


def _bert(tmp_path, ablation="bypass"):
    """A tiny BERT from its config (4 layers), its tokenised TEXTS padded to 12, a seeded head, its NetworkScope."""
    transformers = pytest.importorskip("transformers")
    from laya_cli import backbones as bb
    from laya_cli.backbones import tokenizers as tokenization

    config = transformers.BertConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path / "bert")
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{tmp_path / 'bert'}", pretrained=True, max_length=12)).eval()
    tokenization.train_tokenizer(backbone.input_cfg, " ".join(TEXTS).split() * 3, "test words")
    x = tokenization.encode(backbone.input_cfg, TEXTS)
    with torch.no_grad():
        mean = tap_means(backbone, x)
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()
    return NetworkScope(backbone, head, mean if ablation == "mean" else None, ablation=ablation), x


@pytest.mark.parametrize("ablation", ["bypass", "mean"])
def test_texts_are_cached_in_length_order_and_come_back_in_their_own(tmp_path, ablation):
    net, x = _bert(tmp_path, ablation)
    lengths = x[:, 1].sum(1)
    assert len(set(lengths.tolist())) > 4 and not torch.equal(lengths, lengths.sort().values)
    # each text alone: its own length, no other row in its batch — what every row's cache must be
    alone = [frozen_removals(net, x[k : k + 1], "cpu") for k in range(len(x))]
    want = [[torch.cat([a[i][j] for a in alone]) for j in range(len(alone[0][i]))] for i in range(len(alone[0]))]
    seen = _seen(net)
    got = frozen_removals(net, x, "cpu", text_batch=3)
    assert [len(b) for b, _ in seen] == [3, 3, 2]
    # each batch cut to its own longest: only the last holds the longest text
    assert [cut for _, cut in seen] == [int(b[:, 1].sum(1).max()) for b, _ in seen]
    assert seen[0][1] < seen[-1][1] == int(lengths.max())
    order = torch.cat([b[:, 1].sum(1) for b, _ in seen])
    assert torch.equal(order, lengths.sort(stable=True).values)
    assert [len(r) for r in got] == [4, 3, 2, 1] and all(len(t) == len(x) for r in got for t in r)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)  # float rounding of other batch shapes only
    # as drawn (one batch cut to the draw's longest) agrees alike: the order changes which positions are computed
    drawn = frozen_removals(net, x, "cpu", text_batch=len(x))
    for g, w in zip(got, drawn):
        for a, b in zip(g, w):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_images_run_as_given(tmp_path):
    backbone = make_backbone("mlp", 8)
    x = torch.rand(10, *backbone.example_shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        mean = tap_means(backbone, x)
        dims = [h.shape[-1] for h in backbone(x)]
    torch.manual_seed(5)
    net = NetworkScope(backbone, build_head("laya", dims, 5).eval(), mean)
    seen = _seen(net)
    got = frozen_removals(net, x, "cpu", batch_size=4, text_batch=2)
    # batch_size's batches in the given order (text_batch is for texts), and bit for bit those batches' removals
    assert [len(b) for b, _ in seen] == [4, 4, 2] and torch.equal(torch.cat([b for b, _ in seen]), x)
    with torch.no_grad():
        parts = [net.removed_taps(b, net.activations(b)) for b in x.split(4)]
    for i, taps in enumerate(got):
        for j, t in enumerate(taps):
            assert torch.equal(t, torch.cat([p[i][j] for p in parts]))
