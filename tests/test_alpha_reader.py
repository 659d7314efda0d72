"""--alpha-reader positions (issue 74): α's scorer also reads each tap's positions through an attention pooling of its
own; the prediction path, the pooled reader and old checkpoints stay as they were."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_user_error, invoke, make_backbone

from laya_cli.backbones.pooling import (
    POSITION_GRID,
    TapFormat,
    pack_positions,
    tap_positions,
    unpack_positions,
)
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.heads import build_head
from laya_cli.model.settings import HeadSettings
from laya_cli.runtime.errors import LayaError

POSITIONS = HeadSettings(alpha_reader="positions", d_star=8, score_hidden=16)


# --------------------------------------------------------------------------- what a tap keeps


def test_a_map_keeps_at_most_an_8_by_8_grid_of_its_positions():
    h = torch.randn(2, 5, 16, 24)
    pos, valid = tap_positions(TapFormat("NCHW"), h, None, cap=64)
    assert pos.shape == (2, POSITION_GRID * POSITION_GRID, 5) and valid.shape == (2, 64) and bool(valid.all())
    # each position is the mean of its own 2×3 patch: the grid's mean is the map's mean
    assert torch.allclose(pos.mean(1), h.mean((2, 3)), atol=1e-5)
    small, _ = tap_positions(TapFormat("NCHW"), torch.randn(2, 5, 3, 4), None, cap=64)
    assert small.shape == (2, 12, 5)  # smaller than the grid: every position as it is
    nhwc, _ = tap_positions(TapFormat("NHWC"), h.permute(0, 2, 3, 1), None, cap=64)
    assert torch.allclose(nhwc, pos)


def test_text_tokens_are_padded_to_the_cap_and_their_padding_masked():
    h, mask = torch.randn(3, 5, 4), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    pos, valid = tap_positions(TapFormat("NLC"), h, mask, cap=8)
    assert pos.shape == (3, 8, 4) and valid.tolist()[1] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert torch.equal(pos[:, :5], h) and not pos[:, 5:].any()


def test_an_image_transformer_keeps_its_class_token_and_pools_its_patch_grid():
    h = torch.randn(2, 1 + 16 * 16, 6)
    pos, valid = tap_positions(TapFormat("NLC", 1), h, None, cap=64)
    assert pos.shape == (2, 1 + 64, 6) and bool(valid.all())
    assert torch.equal(pos[:, 0], h[:, 0])


def test_a_vector_tap_has_no_positions_and_says_so_in_one_line():
    with pytest.raises(LayaError, match="no positions for --alpha-reader positions"):
        tap_positions(TapFormat("NC"), torch.randn(2, 4), None, cap=64, name="blocks.0")


def test_packing_round_trips_and_a_plain_row_is_refused():
    r, pos, valid = torch.randn(2, 4), torch.randn(2, 3, 4), torch.tensor([[1.0, 1, 0], [1, 0, 0]])
    got = unpack_positions(pack_positions(r, pos, valid), 4)
    assert all(torch.equal(a, b) for a, b in zip(got, (r, valid, pos)))
    with pytest.raises(LayaError, match="no packed positions"):
        unpack_positions(r, 4)


# --------------------------------------------------------------------------- the head


def _packed(batch=3, dims=(4, 6), positions=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    valid = torch.ones(batch, positions)
    valid[0, 2:] = 0  # sample 0: two real positions, the rest padding
    return [
        pack_positions(torch.randn(batch, d, generator=g), torch.randn(batch, positions, d, generator=g), valid)
        for d in dims
    ]


def test_the_positions_head_gives_alpha_and_logits_of_the_usual_shapes():
    torch.manual_seed(0)
    head = build_head("laya", [4, 6], 3, POSITIONS).eval()
    out = head(_packed())
    assert out.logits.shape == (3, 3) and out.alpha.shape == (3, 2)
    assert torch.allclose(out.alpha.sum(-1), torch.ones(3))
    assert head.layer_logits(_packed()).shape == (3, 2, 3)


def test_padding_never_moves_alpha_and_a_real_position_does():
    torch.manual_seed(0)
    head = build_head("laya", [4, 6], 3, POSITIONS).eval()
    feats = _packed()
    base = head(feats).alpha
    d = 4
    padded, real = feats[0].clone(), feats[0].clone()
    positions = padded[:, d + 5 :].view(3, 5, d)
    positions[0, 3] += 100.0  # a padding position of sample 0
    real[:, d + 5 :].view(3, 5, d)[0, 0] += 100.0  # a real one
    assert torch.equal(head([padded, feats[1]]).alpha, base)
    assert not torch.allclose(head([real, feats[1]]).alpha[0], base[0])


def test_the_reader_is_attention_with_keys_and_values_a_linear_map_of_the_positions():
    """The cheap form (the keys never formed) is the attention pooling it stands for, padding masked."""
    from laya_cli.model.heads import PositionReader

    torch.manual_seed(0)
    reader = PositionReader([4, 6], 8)
    parts = [(torch.tensor([[1.0, 1, 0], [1, 1, 1]]), torch.randn(2, 3, d)) for d in (4, 6)]
    want = []
    for key, query, (valid, pos) in zip(reader.keys, reader.query, parts):
        k = key(pos)
        logits = (k @ query / 8**0.5).masked_fill(valid <= 0, float("-inf"))
        want.append((torch.softmax(logits, -1).unsqueeze(-1) * k).sum(1))
    assert torch.allclose(reader(parts, False), torch.stack(want, 1), atol=1e-6)


def test_alpha_reads_the_positions_and_the_prediction_only_through_alpha():
    """Positions change α; with α held, the logits are the weighted sum of the pooled, adapted taps alone."""
    torch.manual_seed(0)
    head = build_head("laya", [4, 6], 3, POSITIONS).eval()
    feats = _packed()
    z = head.embed(feats)
    alpha = head.attention(z, feats)
    want = head.classifier((alpha.unsqueeze(-1) * z).sum(1))
    assert torch.allclose(head(feats).logits, want, atol=1e-6)
    with pytest.raises(LayaError, match="reads each layer's positions"):
        head.attention(z)


def test_a_pooled_head_holds_the_weights_it_always_held():
    """The pooled reader adds no parameter, and its config records nothing new: old checkpoints load unchanged."""
    head = build_head("laya", [4, 6], 3, HeadSettings())
    assert not any(k.startswith("reader") for k in head.state_dict())
    assert "alpha_reader" not in HeadSettings().to_dict()
    assert HeadSettings(**{"d_star": 96, "tau": 1.5, "psi": "identity", "score_hidden": 192}).alpha_reader == "pooled"
    positions = build_head("laya", [4, 6], 3, POSITIONS)
    assert {"reader.query", "reader.keys.0.weight"} <= set(positions.state_dict())
    assert POSITIONS.to_dict()["alpha_reader"] == "positions"


def test_other_heads_and_unknown_readers_are_refused():
    with pytest.raises(LayaError, match="--head laya"):
        build_head("concat", [4, 6], 3, HeadSettings(alpha_reader="positions"))
    with pytest.raises(LayaError):
        HeadSettings(alpha_reader="tokens").validate()


# --------------------------------------------------------------------------- backbones


@pytest.mark.parametrize(("name", "side"), [("cnn", 16), ("timm:resnet18", 32), ("timm:vit_tiny_patch16_224", 32)])
def test_a_backbone_reading_positions_packs_them_and_keeps_its_pooled_widths(name, side):
    pytest.importorskip("timm") if name.startswith("timm") else None
    backbone = make_backbone(name, side)
    x = backbone.probe_input()
    pooled = backbone(x)
    backbone.read_positions = True
    packed = backbone(x)
    dims = backbone.dims(x)
    assert dims == [r.shape[-1] for r in pooled]
    for r, row, d in zip(pooled, packed, dims):
        got, valid, pos = unpack_positions(row, d)
        assert torch.allclose(got, r) and valid.shape[1] == pos.shape[1] <= 1 + POSITION_GRID**2
    assert backbone.dims(x, packed=True) == [row.shape[-1] for row in packed]


def test_the_feature_cache_key_tells_packed_rows_from_pooled_ones():
    from laya_cli.features.cache import backbone_identity

    backbone = make_backbone("cnn", 16)
    backbone(backbone.probe_input())
    pooled = backbone_identity(backbone)
    backbone.read_positions = True
    assert "positions" not in pooled and backbone_identity(backbone) != pooled


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def positions_ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("reader") / "cnn.pt"
    r = invoke(
        "train", "--dataset", "digits", "--backbone", "cnn", "--frozen", "--epochs", "1", "--alpha-reader",
        "positions", "--d-star", "16", "--score-hidden", "32", "--out", out, "-q",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


def test_a_checkpoint_with_the_positions_reader_round_trips(positions_ckpt, tmp_path):
    import laya_cli

    ckpt = read_checkpoint(positions_ckpt)
    assert ckpt["head"]["config"]["alpha_reader"] == "positions" and ckpt["dims"] == [32, 64, 128, 256]
    model = laya_cli.load(positions_ckpt)
    assert model.backbone.read_positions
    x = torch.rand(4, 1, 8, 8)
    out = model(x)
    assert out.alpha.shape == (4, 4)
    model.save(tmp_path / "again.pt")
    again = laya_cli.load(tmp_path / "again.pt")
    assert torch.equal(again(x).alpha, out.alpha)


def test_the_cli_reads_a_positions_checkpoint(positions_ckpt, tmp_path):
    info = invoke("info", positions_ckpt)
    assert info.exit_code == 0 and "alpha_reader=positions" in info.output
    audit = invoke("audit", positions_ckpt, "--samples", "24", "--scope", "both", "--json", tmp_path / "a.json", "-q")
    assert audit.exit_code in (0, 1), audit.output  # 1: a gate of the audit's own
    depth = invoke("depth", positions_ckpt, "--time-repeats", "0", "--json", tmp_path / "d.json", "-q")
    assert depth.exit_code in (0, 1), depth.output
    cut = invoke("depth", positions_ckpt, "--truncate", "2", "--out", tmp_path / "cut.pt", "-q")
    assert_user_error(cut, "cannot fold a head whose α reads each layer's positions")


def test_the_cli_refuses_what_cannot_read_positions(tmp_path):
    assert_user_error(
        invoke("train", "--head", "concat", "--alpha-reader", "positions", "--out", tmp_path / "m.pt", "-q"),
        "--alpha-reader positions is the scorer of input-conditioned attention α",
    )
    assert_user_error(
        invoke("train", "--epochs", "1", "--alpha-reader", "positions", "--out", tmp_path / "m.pt", "-q"),
        "no positions for --alpha-reader positions",
    )
    assert not (tmp_path / "m.pt").exists()
