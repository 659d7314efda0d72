"""The audit's work in a few large kernels (issue 73): the batched kernels give the numbers the per-pass ones gave,
and ``benchmarks.dispatch`` counts operations and host synchronisations."""

from __future__ import annotations

import pytest
import torch

from laya_cli.auditing.metrics import (
    degenerate_effects,
    deletion_at_1,
    faithfulness_rows,
    lolo_effects,
    spearman_rows,
    stacked_scores,
    target_probability,
    tie_undefined,
)
from laya_cli.model.heads import build_head


def _per_pass_lolo(head, feats, target, reference, ablation):
    """Δ as L + 1 separate head passes (the definition, as laya computed it before issue 73)."""
    base = target_probability(head(feats).logits, target)
    removed = []
    for i, r in enumerate(feats):
        if ablation == "mask":
            mask = torch.ones(len(target), len(feats))
            mask[:, i] = 0
            removed.append(target_probability(head(feats, alpha_mask=mask).logits, target))
            continue
        fill = torch.zeros_like(r) if ablation == "zero" else reference[i].expand_as(r)
        removed.append(target_probability(head([*feats[:i], fill, *feats[i + 1 :]]).logits, target))
    return base.unsqueeze(1) - torch.stack(removed, dim=1)


@pytest.mark.parametrize("kind", ["laya", "scalarmix", "concat", "last"])
@pytest.mark.parametrize("ablation", ["mean", "zero", "mask"])
def test_lolo_in_one_pass_matches_the_passes(kind, ablation):
    if ablation == "mask" and kind in ("concat", "last"):
        pytest.skip("mask needs layer weights")
    torch.manual_seed(0)
    dims = [12, 12, 20, 8]
    head = build_head(kind, dims, 5).eval()
    feats = [torch.randn(9, d) for d in dims]
    reference = [torch.randn(d) for d in dims]
    with torch.no_grad():
        target = head(feats).logits.argmax(-1)
        expected = _per_pass_lolo(head, feats, target, reference, ablation)
        got = lolo_effects(head, feats, target, reference, ablation)
    assert got.shape == (9, 4)
    # a head reads each row alone: the same kernels over more rows give the same numbers (to float rounding)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert got.abs().sum() > 0


def _same(x, y) -> bool:
    return x.shape == y.shape and torch.equal(x.nan_to_num(9.0), y.nan_to_num(9.0))


def _check_against_each_alone(scores: list, delta, tol: float) -> None:
    """``faithfulness_rows`` on the stacked scores against the per-method and per-question functions it replaces."""
    got = faithfulness_rows(stacked_scores(scores, delta), delta, tol)
    assert _same(got.degenerate, degenerate_effects(delta, tol))
    assert _same(got.exactly_degenerate, degenerate_effects(delta))
    _, oracle, random = deletion_at_1(delta, delta)
    assert _same(got.oracle, oracle) and _same(got.random, random)
    assert got.rho.shape == got.tie_undefined.shape == got.d1.shape == (len(scores), len(delta))
    for k, a in enumerate(scores):
        alone = spearman_rows(a, delta, tol)
        assert _same(got.rho[k], alone)
        assert torch.equal(got.tie_undefined[k], tie_undefined(alone, spearman_rows(a, delta), delta, tol))
        assert _same(got.d1[k], deletion_at_1(a, delta, tol)[0])


def test_faithfulness_of_all_methods_at_once_matches_each_alone():
    torch.manual_seed(1)
    delta = torch.randn(40, 6).double()
    delta[::4, :3] = 0.25  # ties in Δ
    delta[::7] = 0.0  # degenerate rows
    delta[1::9, :5] = 0.5 + torch.arange(5) * 0.02  # degenerate only within the larger tolerance
    scores = [torch.randn(40, 6), torch.rand(40, 6).round(decimals=1), torch.full((40, 6), 0.5)]
    scores[0][::5, 2] = float("nan")
    for tol in (0.0, 0.05):
        for dtype in (torch.float64, torch.float32):  # Δ as the audit has it (float32) or wider
            _check_against_each_alone(scores, delta.to(dtype), tol)


@pytest.mark.parametrize("methods,samples,layers", [(0, 5, 4), (1, 1, 2), (3, 13, 1), (4, 33, 13), (2, 7, 3)])
def test_faithfulness_rows_on_many_shapes_matches_each_alone(methods, samples, layers):
    g = torch.Generator().manual_seed(methods * 100 + layers)
    delta = (torch.randn(samples, layers, generator=g) * 0.1).round(decimals=2).float()  # ties at float32
    delta[::3] = delta[::3, :1]  # whole rows of one value
    scores = [(torch.randn(samples, layers, generator=g)).round(decimals=1) for _ in range(methods)]
    for a in scores[1:2]:
        a[::2, 0] = float("nan")
    for tol in (0.0, 1e-4, 0.011, 0.05):
        _check_against_each_alone(scores, delta, tol)


def test_faithfulness_rows_keeps_the_degenerate_flag_in_the_effects_own_precision():
    # 0.3f − 1e-8f rounds up in float32 (0.30000001192…) and is 0.30000000192… in float64: at a tol between the two
    # the pair is one tie group only in float64. The flag at the tolerance follows Δ's float32 gaps, as
    # ``degenerate_effects`` always has (ρ's ties are float64's: rounding noise at the tolerance's edge)
    delta = torch.tensor([[1e-8, 0.3, 5.0], [1e-8, 0.3, 0.6]])
    tol = float(delta[0, 1].double() - delta[0, 0].double())
    assert not degenerate_effects(delta, tol)[0] and degenerate_effects(delta.double(), tol)[0]  # the case is real
    got = faithfulness_rows(stacked_scores([torch.rand(2, 3)], delta), delta, tol)
    assert torch.equal(got.degenerate, degenerate_effects(delta, tol))


def test_the_tally_counts_operations_and_host_synchronisations():
    from benchmarks.dispatch import count

    t = torch.arange(6.0)
    tally = count(lambda: (t.sum().item(), t[t > 2], t.tolist(), t.cpu()))
    assert tally.ops["sum"] == 1 and tally.ops["gt"] == 1
    assert tally.syncs == {"scalar read": 1, "data-dependent shape": 1, "host copy": 2}
    assert torch.Tensor.tolist(t) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # the patch is undone
    assert count(lambda: t + 1).n_syncs == 0
    viewed = count(lambda: (t.view(2, 3).t() + 1).unsqueeze(0))  # three views around one kernel
    assert (viewed.n_ops, viewed.n_launches, dict(viewed.views)) == (4, 1, {"view": 1, "t": 1, "unsqueeze": 1})


@pytest.mark.slow
def test_quick_dispatch_run_counts_every_phase_of_a_cnn():
    from benchmarks.dispatch import main, table

    (result,) = main(["--quick", "--case", "cnn"])
    phases = result["phases"]
    assert list(phases) == ["forward", "extraction", "train step", "head audit", "network audit",
                            "network audit, a batch more", "network estimate (this machine)"]  # fmt: skip
    assert phases["forward"]["over_forward"] == 1.0 == phases["forward"]["launches_over_forward"]
    assert all(0 < row["launches"] <= row["ops"] for row in phases.values() if row["ops"] > 0)
    assert all(row["ops"] > 0 for row in phases.values())
    # a batch more pays its own passes, not the once-per-model chain check the first audit pays
    assert phases["forward"]["ops"] < phases["network audit, a batch more"]["ops"] < phases["network audit"]["ops"]
    assert phases["head audit"]["ops"] > phases["forward"]["ops"]  # L+1 head passes, IG, Grad×Act, the metrics
    assert any("head audit" in line for line in table([result]))
