"""An audit computes what is asked for (--metrics, gates) and IG takes as few steps as each sample needs (--ig-tol)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import assert_user_error, head_only_model, invoke
from test_network import FAMILIES as NETWORK_FAMILIES  # noqa: E402  (mlp, cnn; ViT, timm and torchvision ResNets slow)

from laya_cli.auditing import ig_steps
from laya_cli.auditing.head_scope import run_audit
from laya_cli.auditing.methods import AttributionContext
from laya_cli.auditing.metrics import target_probability
from laya_cli.auditing.names import CORE_METRICS, METRIC_GROUPS, METRICS, computed_metrics, groups_of
from laya_cli.auditing.registry import METHODS
from laya_cli.auditing.results import GROUP_KEYS
from laya_cli.auditing.settings import AuditSettings
from laya_cli.features.extraction import LayerFeatures
from laya_cli.model.heads import HeadSettings, build_head

DIMS, C = [6, 5, 7, 4], 3
DEEPER_KEYS = {k for keys in GROUP_KEYS.values() for k in keys}


def make(batch: int = 24, seed: int = 0, sharp: float = 1.0):
    torch.manual_seed(seed)
    head = build_head("laya", DIMS, C, HeadSettings(d_star=8, score_hidden=16)).eval()
    for p in head.parameters():  # a sharper head is less linear along IG's path: more steps needed
        p.data.mul_(sharp)
    feats = [torch.randn(batch, d) for d in DIMS]
    ref = [torch.randn(d) * 0.1 for d in DIMS]
    return head_only_model(head, ref, C), feats, ref


def data(feats) -> LayerFeatures:
    return LayerFeatures(feats, torch.zeros(len(feats[0]), dtype=torch.long))


# --------------------------------------------------------------------------- what is computed


def test_metric_names_map_to_their_groups():
    assert groups_of(["faithfulness", "sufficiency@1_normalised", "aopc"]) == ["aopc", "sufficiency"]
    assert groups_of(["deletion@1", "accuracy"]) == []
    assert computed_metrics([]) == list(CORE_METRICS)
    assert computed_metrics(METRIC_GROUPS) == list(METRICS)


def test_the_default_audit_computes_only_the_core_metrics_with_the_same_numbers():
    model, feats, _ = make()
    methods = ["laya", "ig", "gradxact", "random"]
    every = run_audit(model, data(feats), methods, AuditSettings(metrics=METRIC_GROUPS, ig_tol=0.0))
    core = run_audit(model, data(feats), methods, AuditSettings(ig_tol=0.0))
    doc = core.to_dict()
    assert doc["computed_metrics"] == list(CORE_METRICS)
    assert every.to_dict()["computed_metrics"] == list(METRICS)
    for m in methods:
        got, full = doc["methods"][m], every.to_dict()["methods"][m]
        assert not DEEPER_KEYS & set(got), m  # deeper metrics on request only
        assert DEEPER_KEYS - {
            "completeness",
            "completeness_error",
            "completeness_effect",
            "completeness_flagged",
        } <= set(full)
        intervals = ("ci", "vs_laya")  # --ci (issue 26): the full audit's blocks also hold the deeper metrics
        assert {k: v for k, v in full.items() if k in got and k not in intervals} == {
            k: v for k, v in got.items() if k not in intervals
        }  # what is computed is identical
        for block in intervals:  # and so are the intervals of the metrics both computed (the same resamples)
            assert {k: v for k, v in full[block].items() if k in got[block]} == got[block]
    assert core.randomisation_samples == 0 and core.randomisation_stages == []


def test_each_group_alone_is_computed_as_in_the_full_audit():
    model, feats, _ = make()
    full = run_audit(model, data(feats), ["laya", "ig"], AuditSettings(metrics=METRIC_GROUPS, ig_tol=0.0)).to_dict()
    for group in METRIC_GROUPS:
        one = run_audit(model, data(feats), ["laya", "ig"], AuditSettings(metrics=(group,), ig_tol=0.0)).to_dict()
        for m in ("laya", "ig"):
            keys = set(one["methods"][m]) & DEEPER_KEYS
            assert keys <= set(GROUP_KEYS[group])
            assert {k: one["methods"][m][k] for k in keys} == {k: full["methods"][m][k] for k in keys}, group


# --------------------------------------------------------------------------- adaptive IG


def test_adaptive_ig_refines_only_the_samples_that_miss_the_tolerance():
    calls = []
    needed = torch.tensor([4, 8, 32, 16])  # the steps each sample needs to converge

    def attribute(rows, n):
        calls.append((rows.tolist(), n))
        delta = torch.where(needed[rows] <= n, torch.zeros(len(rows)), torch.ones(len(rows)))
        return torch.full((len(rows), 2), float(n)), delta

    scores, delta, steps = ig_steps.adaptive_ig(attribute, torch.ones(4), max_steps=32, tol=0.01, first=4)
    assert steps.tolist() == [4, 8, 32, 16]
    assert scores[:, 0].tolist() == [4.0, 8.0, 32.0, 16.0] and delta.tolist() == [0, 0, 0, 0]
    assert calls == [([0, 1, 2, 3], 4), ([1, 2, 3], 8), ([2, 3], 16), ([2], 32)]
    # tol 0: one call at the most steps, as plain IG; the cap is never exceeded
    calls.clear()
    assert ig_steps.adaptive_ig(attribute, torch.ones(4), 32, 0.0, 4)[2].tolist() == [32] * 4 and len(calls) == 1
    assert ig_steps.adaptive_ig(attribute, torch.ones(4), 12, 0.01, first=4)[2].tolist() == [4, 8, 12, 12]
    assert ig_steps.adaptive_ig(attribute, torch.ones(4), 32, 0.01, 16)[2].tolist() == [16, 16, 32, 16]


def test_head_scope_ig_meets_its_tolerance_and_reports_its_steps():
    model, feats, ref = make(batch=40, sharp=4.0)
    tol = 0.001
    result = run_audit(model, data(feats), ["ig"], AuditSettings(ig_tol=tol, steps=64, metrics=("completeness",)))
    s = result.methods["ig"]
    used = s.ig_steps
    assert used["tol"] == tol and used["max_steps"] == 64 and sum(used["count"].values()) == 40
    assert len(used["count"]) > 1  # this sharp head needs more than the first steps for some samples
    assert result.to_dict()["methods"]["ig"]["ig_steps"] == used
    # each sample's own steps give IG within the tolerance (or the most steps were used)
    target = model.head(feats).logits.argmax(-1)
    fixed = {}
    for n in map(int, used["count"]):
        a, d = METHODS["ig"].convergence(model.head, feats, AttributionContext(target, ref, n_steps=n))
        fixed[n] = (a, d)
    with torch.no_grad():
        effect = target_probability(model.head(feats).logits, target) - target_probability(
            model.head([r.expand_as(f) for r, f in zip(ref, feats)]).logits, target
        )
    samples = result.samples["scores"]["ig"]
    ok = 0
    for i in range(40):
        # the sample's scores are those of the fewest steps in 4, 8, 16, … that converge
        n = next(
            n for n in sorted(fixed) if ig_steps.converged(fixed[n][1][i : i + 1], effect[i : i + 1], tol) or n == 64
        )
        torch.testing.assert_close(samples[i].float(), fixed[n][0][i], rtol=0, atol=1e-6)
        ok += bool(ig_steps.converged(fixed[n][1][i : i + 1], effect[i : i + 1], tol))
    assert ok >= 38
    assert s.completeness >= 1 - tol


def test_ig_tol_zero_is_plain_ig_at_the_given_steps():
    model, feats, ref = make()
    result = run_audit(model, data(feats), ["ig"], AuditSettings(ig_tol=0.0, steps=6))
    target = model.head(feats).logits.argmax(-1)
    a, _ = METHODS["ig"].convergence(model.head, feats, AttributionContext(target, ref, n_steps=6))
    torch.testing.assert_close(result.samples["scores"]["ig"].float(), a, rtol=0, atol=0)
    assert result.methods["ig"].ig_steps["count"] == {"6": 24}


@pytest.mark.parametrize("tol", [-0.1, 1.0, math.nan])
def test_bad_ig_tol_is_refused(tol):
    from laya_cli.runtime.errors import LayaError

    with pytest.raises(LayaError, match="--ig-tol"):
        AuditSettings(ig_tol=tol).validate()


@pytest.mark.parametrize("name,side", NETWORK_FAMILIES)
def test_network_scope_adaptive_ig_meets_its_tolerance(name, side):
    from test_network import scope_for

    scope, x, target = scope_for(name, side)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    effects = scope.effects(x, hs, feats, target)
    fixed = scope.integrated_gradients(x, hs, feats, target, n_steps=16)
    same, steps = scope.adaptive_integrated_gradients(x, hs, feats, target, effects, 16, 0.0)
    assert torch.equal(same, fixed) and (steps == 16).all()
    scores, steps = scope.adaptive_integrated_gradients(x, hs, feats, target, effects, 64, 0.005)
    assert steps.shape == scores.shape == effects.shape and steps.max() <= 64
    gap = (scores - effects).abs()  # reduce="sum": a layer's score is the sum of its attributions
    assert ((gap <= 0.005 * effects.abs() + ig_steps.ABS_SLACK + 1e-6) | (steps == 64)).all()


# --------------------------------------------------------------------------- the command


def test_cli_default_json_has_core_metrics_and_a_gate_computes_its_group(digits_ckpt, tmp_path):
    out = tmp_path / "a.json"
    r = invoke("audit", str(digits_ckpt), "--samples", "60", "--json", str(out), "--quiet")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["computed_metrics"] == list(CORE_METRICS) and "aopc" not in doc["methods"]["laya"]
    assert doc["methods"]["ig"]["ig_steps"]["tol"] == AuditSettings.ig_tol
    r = invoke(
        "audit", str(digits_ckpt), "--samples", "60", "--json", str(out), "--quiet",
        "--fail-under", "ig:completeness=0.5", "--max-drop", "sufficiency@1=1", "--baseline", str(out), "--overwrite",
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["computed_metrics"] == [*CORE_METRICS, "sufficiency@1", "sufficiency@1_normalised", "completeness"]
    assert "completeness" in doc["methods"]["ig"] and "aopc" not in doc["methods"]["ig"]
    r = invoke(
        "audit", str(digits_ckpt), "--samples", "60", "--json", str(out), "-q", "--metrics", "all", "--overwrite"
    )  # noqa: E501
    assert json.loads(out.read_text())["computed_metrics"] == list(METRICS)


def test_cli_bad_ig_tol_is_one_line(digits_ckpt):
    assert_user_error(invoke("audit", str(digits_ckpt), "--ig-tol", "1.5"), "--ig-tol")


@pytest.mark.parametrize("dims", [[6, 5, 7, 4], [6, 5], [6]])
@pytest.mark.parametrize("ablation", ["mean", "mask"])
def test_curves_sharing_passes_equal_the_two_curves(dims, ablation):
    from laya_cli.auditing.metrics import (
        curves_sharing_passes,
        deletion_curve,
        insertion_curve,
        keep_only_probability,
        lolo_effects,
        rank_layers,
    )

    torch.manual_seed(3)
    head = build_head("laya", dims, C, HeadSettings(d_star=8, score_hidden=16)).eval()
    feats = [torch.randn(9, d) for d in dims]
    ref = None if ablation == "mask" else [torch.randn(d) * 0.1 for d in dims]
    with torch.no_grad():
        target = head(feats).logits.argmax(-1)
        base = target_probability(head(feats).logits, target)
    order = rank_layers(torch.randn(9, len(dims)))
    known = {
        "base": base,
        "delta": lolo_effects(head, feats, target, ref, ablation),
        "keep": keep_only_probability(head, feats, target, ref, ablation),
    }
    got = curves_sharing_passes(head, feats, target, order, known, ref, ablation)
    torch.testing.assert_close(got["deletion_curve"], deletion_curve(head, feats, target, order, ref, ablation))
    torch.testing.assert_close(got["insertion_curve"], insertion_curve(head, feats, target, order, ref, ablation))
    alone = curves_sharing_passes(head, feats, target, order, {"base": base, "delta": known["delta"]}, ref, ablation)
    assert set(alone) == {"deletion_curve"}
    torch.testing.assert_close(alone["deletion_curve"], got["deletion_curve"])


def test_network_scope_json_says_what_it_computed_and_ig_steps(digits_ckpt, tmp_path):
    out = tmp_path / "n.json"
    audit = ("audit", str(digits_ckpt), "--samples", "30", "--scope", "network", "--compare", "ig,gradxact")
    r = invoke(*audit, "--json", str(out), "--quiet")  # IG named: the network scope's default leaves it out
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["computed_metrics"] == list(CORE_METRICS) and doc["methods"] == {}
    steps = doc["network"]["methods"]["ig"]["ig_steps"]
    assert steps["max_steps"] == 32 and sum(steps["count"].values()) == 30 * len(doc["layers"])
    assert set(steps["count"]) <= {"16", "32"}  # network scope starts at 16 steps


def test_the_convergence_benchmark_runs():
    """``network_audit --convergence``: the figures behind IG's first steps (a smoke run at 2 and 4 steps)."""
    from benchmarks import network_audit
    from laya_cli.runtime import progress

    with progress.enabled(False):
        rows = network_audit.main(["--images", "2", "--convergence", "2,4", "--device", "cpu"])
    assert [r["steps"] for r in rows] == [2, 4]
    assert rows[1]["network_gap"] <= rows[0]["network_gap"] and 0.9 < rows[1]["head_completeness"] <= 1
