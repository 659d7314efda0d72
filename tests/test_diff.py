"""`laya diff` (laya_cli.auditing.diff, docs/audit.md "laya diff") and its statistics (laya_cli.stats): the paired
permutation test against a by-hand loop, McNemar against scipy's exact binomial test, Holm and BH against
by-hand and scipy, the JS divergence against scipy; the command end to end, its gate and its errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import assert_user_error, invoke
from scipy import stats as sps
from scipy.spatial.distance import jensenshannon

from laya_cli.auditing.diff.job import check_comparable
from laya_cli.runtime.errors import LayaError
from laya_cli.stats.divergence import jensen_shannon
from laya_cli.stats.mcnemar import mcnemar, mcnemar_exact
from laya_cli.stats.multiple import benjamini_hochberg, holm
from laya_cli.stats.permutation import CHUNK, paired_profile_test, swap_signs


def _profiles(rng, n, shift=0.0):
    a = rng.dirichlet([2, 2, 2], n)
    b = np.abs(a + rng.normal(0, 0.05, a.shape) + np.array([shift, 0, -shift]))
    return a, b / b.sum(1, keepdims=True)


def test_js_divergence_is_scipys_squared_distance():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet([1, 1, 1, 1], 5), rng.dirichlet([1, 1, 1, 1], 5)
    for i in range(5):
        assert jensen_shannon(p[i], q[i]) == pytest.approx(jensenshannon(p[i], q[i], base=2) ** 2, abs=1e-12)
    assert jensen_shannon(p[0], p[0]) == 0


@pytest.mark.parametrize("shift", [0.0, 0.03])
def test_the_permutation_test_equals_a_by_hand_loop(shift):
    rng = np.random.default_rng(1)
    a, b = _profiles(rng, 150, shift)
    fast = paired_profile_test(a, b, 300, seed=7)
    # the same swaps, one permutation at a time, swapping the rows themselves
    g = np.random.default_rng(7)
    observed = jensen_shannon(a.mean(0), b.mean(0))
    exceed, done = 0, 0
    while done < 300:
        signs = swap_signs(g, min(CHUNK, 300 - done), len(a))
        for s in signs:
            swap = s < 0
            pa, pb = np.where(swap[:, None], b, a), np.where(swap[:, None], a, b)
            exceed += jensen_shannon(pa.mean(0), pb.mean(0)) >= observed - 1e-12
        done += len(signs)
    assert fast.statistic == pytest.approx(observed)
    assert fast.p_value == pytest.approx((1 + exceed) / 301)


def test_the_permutation_test_tells_a_shift_from_noise():
    rng = np.random.default_rng(2)
    assert paired_profile_test(*_profiles(rng, 400, 0.05), 500, seed=0).p_value < 0.01
    assert paired_profile_test(*_profiles(rng, 400, 0.0), 500, seed=0).p_value > 0.05


@pytest.mark.parametrize(("b", "c"), [(0, 0), (3, 0), (95, 58), (10, 12), (1, 30), (400, 380)])
def test_mcnemar_exact_matches_scipys_binomial_test(b, c):
    expected = 1.0 if b + c == 0 else sps.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9)


def test_mcnemar_counts_the_discordant_samples():
    a = np.array([1, 1, 0, 0, 1, 0], dtype=bool)
    b = np.array([1, 0, 1, 1, 1, 0], dtype=bool)
    t = mcnemar(a, b)
    assert (t.a_only, t.b_only) == (1, 2) and t.p_value == pytest.approx(1.0)


def test_holm_and_bh_match_by_hand_and_scipy():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan, 0.2])
    ok = p[~np.isnan(p)]
    order = np.argsort(ok)
    m = len(ok)
    by_hand = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * ok[i])
        by_hand[i] = min(1.0, running)
    got = holm(p)
    assert np.isnan(got[4]) and np.allclose(got[~np.isnan(p)], by_hand)
    bh = benjamini_hochberg(p)
    assert np.isnan(bh[4]) and np.allclose(bh[~np.isnan(p)], sps.false_discovery_control(ok, method="bh"))


def test_models_with_other_taps_are_refused():
    a = SimpleNamespace(layer_names=["blocks.0", "blocks.1", "blocks.2"], classes=["x", "y"])
    b = SimpleNamespace(layer_names=["blocks.0", "blocks.2"], classes=["x", "y"])
    with pytest.raises(LayaError, match="same taps"):
        check_comparable(a, b, "a.pt", "b.pt")
    with pytest.raises(LayaError, match="different classes"):
        check_comparable(a, SimpleNamespace(layer_names=a.layer_names, classes=["x", "z"]), "a.pt", "b.pt")


FAST = ["--samples", "200", "--permutations", "200"]


def test_a_model_against_itself_changes_nothing(digits_ckpt, tmp_path):
    out, md = tmp_path / "d.json", tmp_path / "d.md"
    r = invoke("diff", digits_ckpt, digits_ckpt, *FAST, "--json", out, "--markdown", md, "--fail-if-changed", "any")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["changed_classes"] == [] and doc["accuracy"]["change"] == 0 and doc["accuracy"]["p_value"] == 1
    assert doc["overall"]["js"] == 0 and all(row["alpha_change"] == 0 for row in doc["overall"]["layers"])
    assert doc["profile"] == "alpha" and len(doc["classes"]) == 10
    assert "### laya diff" in md.read_text() and "layer usage by class" in r.output
    assert "…" not in r.output  # a pipe is no terminal: the tables print whole, not cut to 80 columns


def test_two_models_differ_and_the_gate_fires(digits_ckpt, digits_ckpts, tmp_path):
    out = tmp_path / "d.json"
    r = invoke("diff", digits_ckpt, digits_ckpts["laya"], *FAST, "--json", out, "--fail-if-changed", "any")
    doc = json.loads(out.read_text())
    assert doc["overall"]["js"] > 0
    assert r.exit_code == (1 if doc["changed_classes"] else 0), r.output
    for c in doc["classes"].values():
        assert 0 < c["p_value"] <= 1 and c["p_adjusted"] >= c["p_value"]


def test_diff_usage_errors(digits_ckpt):
    assert_user_error(invoke("diff", digits_ckpt, digits_ckpt, "--fail-if-changed", "Zebra"), "no such class")
    assert_user_error(invoke("diff", digits_ckpt, digits_ckpt, "--correction", "bonferroni"), "--correction")
    assert_user_error(invoke("diff", digits_ckpt, digits_ckpt, "--alpha", "2"), "--alpha")


def test_network_scope_diff_compares_total_effects(digits_ckpt, digits_ckpts, tmp_path):
    head_json, net_json = tmp_path / "h.json", tmp_path / "n.json"
    args = ["diff", digits_ckpt, digits_ckpts["laya"], *FAST]
    assert invoke(*args, "--json", head_json).exit_code in (0, 1)
    r = invoke(*args, "--json", net_json, "--scope", "network")
    assert r.exit_code in (0, 1), r.output
    head, net = json.loads(head_json.read_text()), json.loads(net_json.read_text())
    assert net["settings"]["scope"] == "network" and head["settings"]["scope"] == "head"
    assert "LOLO Δ at network scope" in " ".join(r.output.split())
    # α and accuracy are the head's own at either scope; Δ is the total effect at network scope
    assert net["accuracy"] == head["accuracy"] and net["overall"]["js"] == head["overall"]["js"]
    layers = lambda doc, k: [row[k] for row in doc["overall"]["layers"]]
    assert layers(net, "alpha_a") == layers(head, "alpha_a")
    assert layers(net, "delta_a") != layers(head, "delta_a")
    assert layers(net, "delta_a")[-1] == pytest.approx(layers(head, "delta_a")[-1], abs=1e-6)  # nothing after it


def test_diff_bad_scope_is_one_line(digits_ckpt):
    assert_user_error(invoke("diff", digits_ckpt, digits_ckpt, "--scope", "both"), "--scope")


def test_diff_takes_the_shared_options(digits_ckpt, tmp_path):
    """--config (its own [diff] table), -v (the resolved options), -q (no tables) and --log-to, as every command."""
    pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install 'laya-audit[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config, out, runs = tmp_path / "run.toml", tmp_path / "d.json", tmp_path / "runs"
    config.write_text("samples = 999\n[diff]\nsamples = 200\npermutations = 200\n[audit]\nsamples = 5\n")
    r = invoke("diff", digits_ckpt, digits_ckpt, "--config", config, "-v", "--json", out)
    assert r.exit_code == 0, r.output
    assert "options (defaults < " in r.output and "samples=200" in r.output and "layer usage by class" in r.output
    doc = json.loads(out.read_text())
    assert doc["n_samples"] == 200 and doc["options"]["values"]["permutations"] == 200
    r = invoke(
        "diff", digits_ckpt, digits_ckpt, *FAST, "-q", "--log-to", f"tensorboard:{runs}", "--json", out, "--overwrite"
    )
    assert r.exit_code == 0 and "layer usage by class" not in r.output, r.output
    (folder,) = [p for p in runs.iterdir() if p.name.startswith("diff-")]
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert acc.Scalars("diff/js")[0].value == 0 and acc.Scalars("diff/changed_classes")[0].value == 0
    assert (folder / "artifacts" / "d.json").is_file()
    assert_user_error(invoke("diff", digits_ckpt, digits_ckpt, "-q", "-v"), "--quiet and --verbose")
    bad = tmp_path / "bad.toml"
    bad.write_text("[diff]\nzebra = 1\n")
    assert_user_error(invoke("diff", digits_ckpt, digits_ckpt, "--config", bad), "unknown option 'zebra'")


def test_a_class_is_called_changed_only_when_significant_and_of_a_practical_size():
    """Issue 64: three classes were 'changed yes !' for JS ≈ 0.003 bits. Class 0's profile moves a little on every
    sample (significant, far under 0.01 bits), class 1's a lot; --min-js is recorded with the test."""
    from laya_cli.auditing.diff.compare import compare_profiles
    from laya_cli.auditing.diff.profiles import Profiles
    from laya_cli.auditing.diff.settings import PRACTICAL_JS_BITS, DiffSettings
    from laya_cli.report.diff import diff_markdown

    rng, n = np.random.default_rng(0), 200
    label = np.repeat([0, 1], n // 2)
    alpha_a = np.tile([0.5, 0.3, 0.2], (n, 1)) + rng.normal(0, 0.002, (n, 3))
    shift = np.where(label[:, None] == 0, [0.02, -0.01, -0.01], [0.25, -0.15, -0.1])
    alpha_b = alpha_a + shift
    zeros = np.zeros((n, 3))
    a = Profiles(label, label, zeros, alpha_a / alpha_a.sum(1, keepdims=True), None)
    b = Profiles(label, label, zeros, alpha_b / alpha_b.sum(1, keepdims=True), None)
    doc = compare_profiles(a, b, ["small", "large"], ["l0", "l1", "l2"], DiffSettings(permutations=200)).to_dict()
    small, large = doc["classes"]["small"], doc["classes"]["large"]
    assert small["significant"] and small["js"] < PRACTICAL_JS_BITS and not small["changed"]
    assert large["significant"] and large["js"] >= PRACTICAL_JS_BITS and large["changed"]
    assert doc["changed_classes"] == ["large"] and doc["settings"]["min_js"] == PRACTICAL_JS_BITS
    md = diff_markdown({**doc, "settings": {**doc["settings"], "model_a": "a.pt", "model_b": "b.pt"}})
    row = next(line for line in md.splitlines() if line.startswith("| small |"))
    assert row.endswith("| small |")  # significant, under the practical size
    assert "p = <" not in md and "JS at least 0.01 bits" in md
    loose = compare_profiles(a, b, ["small", "large"], ["l0", "l1", "l2"], DiffSettings(permutations=200, min_js=0))
    assert loose.changed == ["small", "large"]
