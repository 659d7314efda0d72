"""Faithfulness must not rank floating-point noise (issue #39; docs/metrics.md, "Ties"): the tie tolerance
(``metrics.tie_levels``) in Spearman, Deletion@1 and the degenerate test, checked against scipy on snapped
values; the same audit at batch sizes 1, 7 and 256 and in float32 and float64 gives the same faithfulness on a
head whose α ignores some layers (their Δ are rounding) and on an ordinary one; the ``ties`` block, --tie-tol
on the command line, baselines audited with another tolerance, ``laya diff``'s profiles."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers import assert_user_error, head_only_model, invoke, make_collapsed_head
from scipy.stats import rankdata, spearmanr

from laya_cli.auditing.diff.compare import layer_profile
from laya_cli.auditing.diff.profiles import Profiles
from laya_cli.auditing.head_scope import run_audit
from laya_cli.auditing.metrics import (
    degenerate_effects,
    deletion_at_1,
    spearman_rows,
    tie_levels,
    tie_undefined,
)
from laya_cli.auditing.settings import TIE_TOL, AuditSettings
from laya_cli.features.extraction import LayerFeatures
from laya_cli.gates.regression import settings_differences
from laya_cli.gates.thresholds import check_thresholds, parse_thresholds

N = 64
METHODS = ["ig", "gradxact"]
AUDITED = ["laya", *METHODS, "random"]


# --------------------------------------------------------------------------- the tie groups


def test_tie_levels_chains_gaps_up_to_tol_and_keeps_nan():
    x = torch.tensor([[0.3, 1e-9, -2e-9, 0.5, 5e-6, math.nan], [0.0, 0.8e-5, 1.6e-5, 2.4e-5, 1.0, 0.999995]])
    snapped = tie_levels(x, 1e-5)
    # row 0: {−2e-9, 1e-9, 5e-6} chain into one group at its smallest value; 0.3 and 0.5 stay apart; NaN stays
    assert snapped[0, 1] == snapped[0, 2] == snapped[0, 4] == x[0, 2]
    assert snapped[0, 0] == x[0, 0] and snapped[0, 3] == x[0, 3] and snapped[0, 5].isnan()
    # row 1: gaps of 0.8e-5 chain 0 … 2.4e-5 into one group although it spans 2.4e-5 > tol (single linkage)
    assert torch.equal(snapped[1, :4], torch.zeros(4))
    assert snapped[1, 4] == snapped[1, 5] == x[1, 5]
    assert torch.equal(tie_levels(x, 0.0).nan_to_num(7), x.nan_to_num(7))  # 0: exact ties only, unchanged
    assert torch.equal(tie_levels(x[:, :1], 1.0), x[:, :1])  # a single layer


def test_tie_levels_do_not_depend_on_the_order_of_the_layers():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 7, generator=g, dtype=torch.float64) * 1e-5
    perm = torch.randperm(7, generator=g)
    a, b = tie_levels(x, 1e-5), tie_levels(x[:, perm], 1e-5)
    assert torch.equal(a[:, perm], b)


def near_tied_rows(seed: int, n: int = 200, layers: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and effects with clusters of values within 1e-7 of each other (rounding) among real differences."""
    g = torch.Generator().manual_seed(seed)
    levels = torch.randint(0, 3, (n, layers), generator=g).double() * 0.01
    noise = (torch.rand(n, layers, generator=g, dtype=torch.float64) - 0.5) * 1e-7
    a = torch.randn(n, layers, generator=g, dtype=torch.float64)
    a[: n // 2] = levels[: n // 2] + noise[: n // 2]  # half of the score rows near-tied too
    return a, levels + noise.flip(0)


def test_tie_aware_spearman_equals_scipy_on_snapped_values():
    a, delta = near_tied_rows(1)
    rho = spearman_rows(a, delta, TIE_TOL)
    sa, sd = tie_levels(a, TIE_TOL).numpy(), tie_levels(delta, TIE_TOL).numpy()
    for i in range(len(a)):
        if np.ptp(rankdata(sa[i])) == 0 or np.ptp(rankdata(sd[i])) == 0:
            assert rho[i].isnan()
        else:
            assert rho[i].item() == pytest.approx(spearmanr(sa[i], sd[i]).statistic, abs=1e-12)
    exact = spearman_rows(a, delta)  # without the tolerance the rounding decides
    assert (exact - rho).abs().nan_to_num(0).max() > 0.1


def test_deletion_at_1_averages_over_the_top_tie_group():
    a = torch.tensor([[0.5, 0.5 - 3e-6, 0.1, 0.0]])
    delta = torch.tensor([[0.2, 0.4, 0.0, 0.1]])
    assert deletion_at_1(a, delta)[0].item() == pytest.approx(0.2)  # exact: layer 0 alone on top
    assert deletion_at_1(a, delta, 1e-5)[0].item() == pytest.approx(0.3)  # tied: the mean of layers 0 and 1


def test_degenerate_counts_effects_within_the_floor_as_equal():
    delta = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.3],  # exactly degenerate
            [1e-9, -3e-10, 2e-8, 0.3],  # rounding around zero: degenerate within the floor only
            [1e-9, 0.1, 2e-8, 0.3],  # two layers beyond the floor: defined
        ]
    )
    assert degenerate_effects(delta).tolist() == [True, False, False]
    assert degenerate_effects(delta, TIE_TOL).tolist() == [True, True, False]
    a = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).expand(3, 4)
    rho = spearman_rows(a, delta, TIE_TOL)
    assert tie_undefined(rho, spearman_rows(a, delta), delta, TIE_TOL).tolist() == [False, True, False]


# --------------------------------------------------------------------------- invariance


def audit_at(case, batch_size: int, tol: float = TIE_TOL, methods=AUDITED, ci: float = 0.0):
    head, feats, ref = case
    labels = torch.arange(len(feats[0])) % 5
    model = head_only_model(head, ref, 5)
    settings = AuditSettings(batch_size=batch_size, tie_tol=tol, ci=ci, bootstrap=50)
    return run_audit(model, LayerFeatures(feats, labels), methods, settings)


@pytest.fixture(scope="module")
def partial():
    """α off layers 0–2 (their Δ are float32 rounding), layers 3–5 read: faithfulness stays defined."""
    return make_collapsed_head(batch=N, ignored=(0, 1, 2))


@pytest.mark.parametrize("case", ["partial", "ordinary"])
def test_faithfulness_does_not_depend_on_the_batch_size(case, partial):
    data = partial if case == "partial" else make_collapsed_head(batch=N, collapse=0.0)
    runs = {b: audit_at(data, b) for b in (1, 7, 256)}
    for m in ("laya", *METHODS, "random"):
        values = {b: r.methods[m] for b, r in runs.items()}
        assert max(s.faithfulness for s in values.values()) - min(s.faithfulness for s in values.values()) <= 1e-6
        assert len({s.undefined for s in values.values()}) == 1, {b: s.undefined for b, s in values.items()}
        assert max(s.deletion_at_1 for s in values.values()) - min(s.deletion_at_1 for s in values.values()) <= 1e-6
    print(case, {m: (s.faithfulness, s.undefined) for m, s in runs[7].methods.items()}, runs[7].ties)


def test_without_the_tolerance_rounding_decides():
    """The collapsed case exercises the noise: with exact ties float32 and float64 rank the rounding differently
    (whether batch sizes do too depends on the CPU's kernels: on the MiniLM of issue #39 they did)."""
    from benchmarks.ties import METHODS_MEASURED, measure

    runs = measure(*make_collapsed_head(batch=N, ignored=(0, 1, 2)))
    ref = runs.pop("f64")
    gaps = [
        abs(_mean(faithfulness(r[m], r["delta"], 0.0)) - _mean(faithfulness(ref[m], ref["delta"], 0.0)))
        for r in runs.values()
        for m in METHODS_MEASURED
    ]
    assert max(gaps) > 1e-3


def _mean(t: torch.Tensor) -> float:
    return t[~t.isnan()].mean().item()


def faithfulness(scores, delta, tol=TIE_TOL):
    return spearman_rows(scores, delta, tol).masked_fill(degenerate_effects(delta, tol), math.nan)


@pytest.mark.parametrize("collapse", [28.0, 0.0])
def test_faithfulness_in_float32_equals_float64(collapse):
    """benchmarks.ties runs the audit's own code in float32 at batch sizes 1, 7, 256 and the same in float64."""
    from benchmarks.ties import METHODS_MEASURED, measure

    runs = measure(*make_collapsed_head(batch=N, ignored=(0, 1, 2), collapse=collapse))
    ref = runs.pop("f64")
    for name, r in runs.items():
        for m in METHODS_MEASURED:
            rho = spearman_rows(r[m], r["delta"], TIE_TOL).masked_fill(
                degenerate_effects(r["delta"], TIE_TOL), math.nan
            )
            rho64 = spearman_rows(ref[m], ref["delta"], TIE_TOL)
            rho64 = rho64.masked_fill(degenerate_effects(ref["delta"], TIE_TOL), math.nan)
            assert torch.equal(rho.isnan(), rho64.isnan()), (name, m)
            assert (rho - rho64).nan_to_num(0).abs().max() <= 1e-6, (name, m)


def test_collapsed_attention_is_undefined_by_ties_and_reported():
    """α on the last layer only (the MiniLM case): every other Δ is rounding, so every sample is degenerate within
    the floor — undefined for faithfulness, and the ties block says it is because of the ties."""
    runs = {b: audit_at(make_collapsed_head(batch=N), b, ci=0.9) for b in (1, 7, 256)}
    for r in runs.values():
        assert r.ties["tolerance"] == TIE_TOL
        # float32 often rounds these Δ to exactly 0 within a batch (undefined before); the others only tie
        by_ties = r.ties["degenerate_by_ties"]
        assert r.ties["degenerate"] == N and by_ties > 0
        for m in AUDITED:
            s = r.methods[m]
            assert math.isnan(s.faithfulness) and s.undefined == N and s.undefined_by_ties == by_ties
            assert r.ties["undefined_by_ties"][m] == by_ties and r.ties["undefined_other"][m] == N - by_ties
            assert np.isnan(r.columns[m]["faithfulness"]).all()  # the bootstrap's per-sample column too
        note = next(n for n in r.notes if "only within the given tie tolerance" in n)
        assert f"--tie-tol {TIE_TOL:g}" in note and "float rounding" not in note  # the tolerance given, not a cause
    misses = check_thresholds(runs[7], parse_thresholds("faithfulness=0.5"))
    assert misses and all("degenerate on all" in m and "only within --tie-tol" in m for m in misses)
    exact = audit_at(make_collapsed_head(batch=N), 7, tol=0.0)
    assert exact.ties["degenerate"] < N and not math.isnan(exact.methods["ig"].faithfulness)  # rounding ranked


# --------------------------------------------------------------------------- the command line, gates, diff


def test_cli_tie_tol_is_validated_recorded_and_gated(digits_ckpt, tmp_path):
    assert_user_error(invoke("audit", digits_ckpt, "--tie-tol", "-1", "--samples", "20"), "--tie-tol")
    out = tmp_path / "a.json"
    r = invoke("audit", digits_ckpt, "--samples", "40", "--steps", "4", "--ci", "0", "--json", out, "--tie-tol", "1e-4")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["tie_tol"] == 1e-4 and doc["ties"]["tolerance"] == 1e-4
    assert set(doc["ties"]["undefined_by_ties"]) == set(doc["methods"])
    assert "ties within 0.0001" in " ".join(r.output.split())
    again = ["audit", digits_ckpt, "--samples", "40", "--steps", "4", "--ci", "0", "--baseline", out]
    assert_user_error(invoke(*again), "tie_tol 0.0001 -> 1e-05")  # another tolerance: refused
    assert invoke(*again, "--allow-settings-change").exit_code == 0
    old = {**doc, "settings": {k: v for k, v in doc["settings"].items() if k != "tie_tol"}}
    assert settings_differences(old, doc) == ["tie_tol 0.0 -> 0.0001"]  # before --tie-tol: exact ties


def test_network_scope_reports_its_ties(digits_ckpt, tmp_path):
    out = tmp_path / "n.json"
    r = invoke("audit", digits_ckpt, "--scope", "both", "--samples", "30", "--steps", "4", "--ci", "0", "--json", out)
    assert r.exit_code == 0, r.output
    ties = json.loads(out.read_text())["network"]["ties"]
    assert ties["tolerance"] == TIE_TOL and "undefined_by_ties" in ties


def test_diff_profile_drops_effects_within_the_floor():
    delta = np.array([[1e-9, -3e-9, 0.2, 0.2], [2e-8, -1e-9, 5e-9, 0.0]])
    p = Profiles(label=np.zeros(2), pred=np.zeros(2), delta=delta, alpha=None, contrib=None)
    assert layer_profile(p, False, TIE_TOL).tolist() == [[0, 0, 0.5, 0.5], [0, 0, 0, 0]]
    assert layer_profile(p, False)[1].sum() == pytest.approx(1.0)  # exact: rounding normalised into a profile
    r = invoke("diff", "a.pt", "b.pt", "--tie-tol", "-1")
    assert r.exit_code == 2


def test_cli_audit_of_a_trained_model_does_not_depend_on_the_batch_size(digits_ckpt, tmp_path):
    """The usual case end to end: a trained digits checkpoint audited at --batch-size 1, 7 and 256."""
    docs = {}
    for b in (1, 7, 256):
        out = tmp_path / f"a{b}.json"
        args = ["--samples", "60", "--steps", "4", "--ci", "0", "--batch-size", b, "--json", out]
        assert invoke("audit", digits_ckpt, "--compare", "ig,gradxact", *args).exit_code == 0
        docs[b] = json.loads(out.read_text())
    for m in AUDITED:
        got = {b: d["methods"][m] for b, d in docs.items()}
        assert max(g["faithfulness"] for g in got.values()) - min(g["faithfulness"] for g in got.values()) <= 1e-6
        assert len({(g["undefined"], g["undefined_by_ties"]) for g in got.values()}) == 1
    assert len({json.dumps(d["ties"]) for d in docs.values()}) == 1


def test_report_html_states_the_tolerance():
    from laya_cli.report.html import audit_section

    doc = {"settings": {"tie_tol": 1e-5, "steps": 32, "ig_tol": 0.001}, "methods": {}, "layers": []}
    assert "ties within 1e-05" in audit_section({**doc, "ties": {"degenerate_by_ties": 0}})
    assert "(3 samples undefined by ties)" in audit_section({**doc, "ties": {"degenerate_by_ties": 3}})
    assert "ties within" not in audit_section({**doc, "settings": {"steps": 32}})  # an audit from before the option
