import pytest
import torch

from laya_cli.model.heads import HEADS, Head, HeadSettings, LAYAHead, build_head
from laya_cli.runtime.errors import LayaError

DIMS = [64, 32, 16]


def feats(batch=5, dims=DIMS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, d, generator=g) for d in dims]


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_every_head_gives_logits_of_the_right_shape(kind):
    head = build_head(kind, DIMS, num_classes=7)
    out = head(feats())
    assert out.logits.shape == (5, 7)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("psi", ["identity", "mlp"])
def test_laya_alpha_is_a_distribution_per_sample(psi):
    head = build_head("laya", DIMS, 4, HeadSettings(d_star=8, psi=psi, score_hidden=12))
    alpha = head(feats(batch=9)).alpha
    assert alpha.shape == (9, 3)
    assert (alpha >= 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones(9))
    # input-conditioned: different samples get different weights
    assert not torch.allclose(alpha[0], alpha[1])


def test_laya_logits_are_the_attention_weighted_sum_of_adapted_layers():
    head = build_head("laya", DIMS, 4)
    f = feats()
    logits, alpha = head(f)
    z = torch.stack([g(r) for g, r in zip(head.adapters, f)], 1)
    expected = head.classifier((alpha.unsqueeze(-1) * z).sum(1))
    torch.testing.assert_close(logits, expected)
    # layer_logits decomposes the logits exactly
    torch.testing.assert_close((alpha.unsqueeze(-1) * head.layer_logits(f)).sum(1) + head.classifier.bias, logits)


def test_temperature_flattens_attention():
    torch.manual_seed(0)
    sharp = build_head("laya", DIMS, 4, HeadSettings(tau=0.1))
    flat = build_head("laya", DIMS, 4, HeadSettings(tau=100.0))
    flat.load_state_dict(sharp.state_dict())
    f = feats()
    assert flat(f).alpha.std() < sharp(f).alpha.std()


def test_alpha_mask_renormalises_the_remaining_layers():
    head = build_head("laya", DIMS, 4)
    f = feats()
    alpha = head(f).alpha
    mask = torch.tensor([1.0, 0.0, 1.0])
    masked = head(f, alpha_mask=mask).alpha
    assert (masked[:, 1] == 0).all()
    torch.testing.assert_close(masked.sum(-1), torch.ones(5))
    torch.testing.assert_close(masked[:, 0] / masked[:, 2], alpha[:, 0] / alpha[:, 2])


def test_scalarmix_weights_are_global():
    alpha = build_head("scalarmix", DIMS, 4)(feats()).alpha
    assert torch.allclose(alpha, alpha[0].expand_as(alpha))
    torch.testing.assert_close(alpha.sum(-1), torch.ones(5))


def test_last_head_reads_only_the_last_layer():
    head = build_head("last", DIMS, 4)
    f = feats()
    g = [torch.zeros_like(f[0]), torch.zeros_like(f[1]), f[2]]
    torch.testing.assert_close(head(f).logits, head(g).logits)
    assert head(f).alpha is None


@pytest.mark.parametrize("bad", [dict(tau=0.0), dict(tau=-1.0), dict(d_star=0), dict(score_hidden=0), dict(psi="relu")])
def test_bad_head_config_is_a_user_error(bad):
    with pytest.raises(LayaError):
        build_head("laya", DIMS, 4, HeadSettings(**bad))


def test_unknown_head_suggests_the_closest_name():
    with pytest.raises(LayaError, match="did you mean laya"):
        build_head("lay", DIMS, 4)


def test_paper_defaults():
    cfg = HeadSettings()
    assert (cfg.d_star, cfg.tau, cfg.psi, cfg.score_hidden) == (96, 1.5, "identity", 192)
    head = LAYAHead(DIMS, 10, cfg)
    assert head.scorer[0].in_features == 3 * 96 and head.scorer[0].out_features == 192


# (has_alpha, maskable, has_layer_logits) of each head: what the audit, depth and export read.
FLAGS = {
    "laya": (True, True, True),
    "scalarmix": (True, True, False),
    "concat": (False, False, False),
    "last": (False, False, False),
}


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_every_head_is_a_head_whose_class_carries_its_flags(kind):
    head = build_head(kind, DIMS, 4)
    assert isinstance(head, Head) and head.kind == kind == HEADS[kind].kind
    assert (head.has_alpha, head.maskable, head.has_layer_logits) == FLAGS[kind]
    assert head.cascade[0] == "classifier" and all(hasattr(head, name) for name in head.cascade)
    assert (head(feats()).alpha is not None) == head.has_alpha
