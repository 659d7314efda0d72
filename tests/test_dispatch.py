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


def test_faithfulness_of_all_methods_at_once_matches_each_alone():
    torch.manual_seed(1)
    delta = torch.randn(40, 6).double()
    delta[::4, :3] = 0.25  # ties in Δ
    delta[::7] = 0.0  # degenerate rows
    scores = [torch.randn(40, 6), torch.rand(40, 6).round(decimals=1), torch.full((40, 6), 0.5)]
    scores[0][::5, 2] = float("nan")
    stacked = torch.stack([a.double() for a in scores])
    for tol in (0.0, 0.05):
        rho, undefined, d1 = faithfulness_rows(stacked, delta, tol)
        given = faithfulness_rows(stacked, delta, tol, (degenerate_effects(delta, tol), degenerate_effects(delta)))
        assert all(torch.equal(x.nan_to_num(9.0), y.nan_to_num(9.0)) for x, y in zip((rho, undefined, d1), given))
        for k, a in enumerate(scores):
            alone = spearman_rows(a, delta, tol)
            assert torch.equal(rho[k].nan_to_num(9.0), alone.nan_to_num(9.0))
            assert torch.equal(undefined[k], tie_undefined(alone, spearman_rows(a, delta), delta, tol))
            assert torch.equal(d1[k].nan_to_num(9.0), deletion_at_1(a, delta, tol)[0].nan_to_num(9.0))


def test_the_tally_counts_operations_and_host_synchronisations():
    from benchmarks.dispatch import count

    t = torch.arange(6.0)
    tally = count(lambda: (t.sum().item(), t[t > 2], t.tolist(), t.cpu()))
    assert tally.ops["sum"] == 1 and tally.ops["gt"] == 1
    assert tally.syncs == {"scalar read": 1, "data-dependent shape": 1, "host copy": 2}
    assert torch.Tensor.tolist(t) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # the patch is undone
    assert count(lambda: t + 1).n_syncs == 0


@pytest.mark.slow
def test_quick_dispatch_run_counts_every_phase_of_a_cnn():
    from benchmarks.dispatch import main, table

    (result,) = main(["--quick", "--case", "cnn"])
    phases = result["phases"]
    assert list(phases) == ["forward", "extraction", "train step", "head audit", "network audit",
                            "network audit, a batch more", "network estimate (this machine)"]  # fmt: skip
    assert phases["forward"]["over_forward"] == 1.0
    assert all(row["ops"] > 0 for row in phases.values())
    # a batch more pays its own passes, not the once-per-model chain check the first audit pays
    assert phases["forward"]["ops"] < phases["network audit, a batch more"]["ops"] < phases["network audit"]["ops"]
    assert phases["head audit"]["ops"] > phases["forward"]["ops"]  # L+1 head passes, IG, Grad×Act, the metrics
    assert any("head audit" in line for line in table([result]))
