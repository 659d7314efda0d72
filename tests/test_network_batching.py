"""Issue 73, network scope: the batch's work in fewer operations gives the numbers of the loops it replaced, bit for
bit: the L removals' suffixes stacked along the batch (``NetworkScope._stacked_removed_taps``), every method's ρ,
tie flags and Deletion@1 in one set of kernels instead of one per method."""

from __future__ import annotations

import pytest
import torch
from helpers import make_backbone

from laya_cli.auditing.job import run_scoped_audit
from laya_cli.auditing.metrics import deletion_at_1, spearman_rows, tie_undefined
from laya_cli.auditing.names import parse_methods
from laya_cli.auditing.network import batches, patching
from laya_cli.auditing.network.patching import NetworkScope
from laya_cli.auditing.settings import AuditSettings
from laya_cli.features.extraction import tap_means
from laya_cli.model.evaldata import load_eval_data
from laya_cli.model.heads import build_head
from laya_cli.model.laya_model import load_model


def _loop_score_methods(run, b, scored, crossed, rows, degenerate) -> None:
    """The per-method loop ``batches._score_methods`` replaced (main before issue 73's third round), on the scores
    the batch made (``scored``: on the host since the fourth round; ``crossed``: the head's own, where made)."""
    s, delta = run.plan.settings, b.delta
    for m, a in scored.items():
        rho = spearman_rows(a, delta, s.tie_tol)
        rows["rho"].append({m: rho})
        rows["tie"].append({m: tie_undefined(rho, spearman_rows(a, delta), delta, s.tie_tol)})
        rows["d1"].append({m: deletion_at_1(a, delta, s.tie_tol)[0]})
        if m in crossed:
            rows["cross"].append({m: spearman_rows(crossed[m].cpu(), a)})


def _without_memory(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("memory", "seconds", "time")}


@pytest.mark.parametrize("tie_tol", [0.0, 1e-4])
def test_network_batch_equals_the_per_method_loop_bit_for_bit(digits_ckpt, monkeypatch, tie_tol):
    model = load_model(digits_ckpt)
    data = load_eval_data(model, samples=37)  # a last partial batch too
    methods = parse_methods("all")
    settings = AuditSettings(steps=4, batch_size=16, tie_tol=tie_tol, metrics="all").validate()
    staircase, calls = NetworkScope._stacked_removed_taps, []
    monkeypatch.setattr(NetworkScope, "_stacked_removed_taps", lambda self, hs: calls.append(1) or staircase(self, hs))
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
