"""Bootstrap intervals (laya_cli.stats.bootstrap, .audit_columns; docs/metrics.md "Intervals"): the vectorised
resampling against a by-hand loop and scipy.stats.bootstrap, pairing, NaN handling, the compact JSON columns,
and `laya audit --ci` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_user_error, invoke
from scipy import stats as sps

from laya_cli.stats.audit_columns import REFERENCE, STATISTICS, masked, method_intervals, paired_change
from laya_cli.stats.bootstrap import (
    column_mean,
    difference,
    interval,
    mean_of,
    percentile_interval,
    percentile_intervals,
    ratio_of_gains,
    resample_counts,
    resampled_means,
)
from laya_cli.stats.compact import decode, encode, pack, unpack


def _by_hand(columns: dict, n_boot: int, seed: int) -> dict:
    """The same resamples drawn one index row at a time, the mean of each column over its defined rows."""
    rng = np.random.default_rng(seed)
    n = len(next(iter(columns.values())))
    out = {k: [] for k in columns}
    done = 0
    while done < n_boot:
        draws = min(128, n_boot - done)
        idx = rng.integers(0, n, size=(draws, n))
        for row in idx:
            for k, v in columns.items():
                picked = np.asarray(v)[row]
                picked = picked[~np.isnan(picked)]
                out[k].append(picked.mean() if len(picked) else np.nan)
        done += draws
    return {k: np.array(v) for k, v in out.items()}


def test_resampled_means_equal_a_by_hand_loop_with_nan_rows_ignored():
    rng = np.random.default_rng(3)
    a = rng.normal(0.8, 0.3, 257)
    a[rng.random(257) < 0.15] = np.nan
    b = rng.normal(0.1, 1.0, 257)
    fast = resampled_means({"a": a, "b": b}, 300, seed=11)
    slow = _by_hand({"a": a, "b": b}, 300, seed=11)
    for k in ("a", "b"):
        np.testing.assert_allclose(fast[k], slow[k], rtol=1e-12, atol=1e-12)


def test_resample_counts_are_the_drawn_indices():
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    w = resample_counts(rng1, 7, 13)
    idx = rng2.integers(0, 13, size=(7, 13))
    assert w.shape == (7, 13) and (w.sum(1) == 13).all()
    for r in range(7):
        np.testing.assert_array_equal(w[r], np.bincount(idx[r], minlength=13))


def test_the_percentile_interval_agrees_with_scipy_bootstrap():
    """Different random draws, the same estimator: the bounds agree to Monte-Carlo precision."""
    x = np.random.default_rng(0).normal(0.8, 0.28, 2000)
    draws = resampled_means({"x": x}, 4000, seed=1)["x"]
    low, high = percentile_interval(draws, 0.95)
    ref = sps.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", random_state=2).confidence_interval
    width = high - low
    assert abs(low - ref.low) < 0.05 * width and abs(high - ref.high) < 0.05 * width
    assert low < x.mean() < high


def test_intervals_are_seeded_and_cover_the_estimate():
    x = np.random.default_rng(1).random(500)
    m = {"x": column_mean(x)}
    one = interval(mean_of("x"), m, resampled_means({"x": x}, 500, seed=4), 0.9, 500)
    two = interval(mean_of("x"), m, resampled_means({"x": x}, 500, seed=4), 0.9, 500)
    other = interval(mean_of("x"), m, resampled_means({"x": x}, 500, seed=5), 0.9, 500)
    assert one == two and one != other
    assert one.low < one.estimate < one.high and one.level == 0.9


def test_ratio_of_gains_is_the_normalised_deletion():
    m = {"v": 0.6, "o": 0.8, "r": 0.2}
    assert ratio_of_gains("v", "o", "r")(m) == pytest.approx(4 / 6)
    assert np.isnan(ratio_of_gains("v", "o", "r")({"v": 0.5, "o": 0.2, "r": 0.2}))


def _cols(rng, n, shift=0.0):
    faith = np.clip(rng.normal(0.8 + shift, 0.3, n), -1, 1)
    faith[rng.random(n) < 0.1] = np.nan
    oracle = rng.random(n) * 0.5 + 0.5
    return {"faithfulness": faith, "deletion@1": oracle * 0.9, "oracle": oracle, "random": oracle * 0.3}


def test_differences_from_laya_are_paired():
    """ig = laya + a small constant on every sample: paired, the difference's interval is much narrower than
    either method's own interval (unpaired, the noise between samples would not cancel)."""
    rng = np.random.default_rng(7)
    laya = _cols(rng, 800)
    ig = {**laya, "faithfulness": laya["faithfulness"] + 0.01 + rng.normal(0, 0.005, 800)}
    out = method_intervals({"laya": laya, "ig": ig}, 0.95, 1000, seed=0)
    own = out["ig"]["intervals"]["faithfulness"]
    diff = out["ig"]["vs_laya"]["faithfulness"]
    assert diff.low > 0 and diff.estimate == pytest.approx(0.01, abs=0.002)
    assert diff.high - diff.low < 0.1 * (own.high - own.low)
    assert own.n_defined == int((~np.isnan(ig["faithfulness"])).sum())
    assert "vs_laya" in out["laya"] and out["laya"]["vs_laya"] == {}
    assert set(out["ig"]["intervals"]) == {"faithfulness", "deletion@1", "deletion@1_normalised"}  # no aopc column


def test_paired_change_detects_a_drop_only_with_enough_samples():
    rng = np.random.default_rng(2)
    base = _cols(rng, 2000)
    now = {**base, "faithfulness": base["faithfulness"] - 0.02 + rng.normal(0, 0.2, 2000)}
    big = paired_change(base, now, "faithfulness", 0.95, 1000, seed=1)
    head = {k: v[:100] for k, v in base.items()}, {k: v[:100] for k, v in now.items()}
    small = paired_change(*head, "faithfulness", 0.95, 1000, seed=1)
    assert big.high < 0  # a real drop, resolved on 2,000 samples
    assert small.half_width > 3 * big.half_width  # ~ 1/√n: 100 samples resolve ~4.5× less
    assert small.n_defined < 100 and big.n_defined > 1700
    assert paired_change(base, {"oracle": base["oracle"]}, "faithfulness", 0.95, 10, 0) is None


def test_compact_columns_round_trip():
    x = np.array([0.1234, np.nan, -1.0, 1.0, 0.5])
    y = decode(encode(x))
    assert np.isnan(y[1]) and np.allclose(np.delete(y, 1), np.delete(x, 1), atol=5e-4)
    block = pack(
        {"laya": {"faithfulness": x, "oracle": x}, "ig": {"faithfulness": -x, "oracle": x}},
        ("oracle",),
        [3, 1, 2, 0, 4],
    )
    assert set(block["common"]) == {"oracle"} and set(block["methods"]["ig"]) == {"faithfulness"}
    ig = unpack(json.loads(json.dumps(block)), "ig")
    assert set(ig) == {"faithfulness", "oracle"} and np.allclose(ig["faithfulness"][0], -0.1234, atol=5e-4)
    assert unpack(block, "gradxact") is None


FAST = ["--samples", "120", "--steps", "4", "--randomisation-samples", "0"]


def test_audit_json_markdown_and_table_carry_intervals(digits_ckpt, tmp_path):
    out, md = tmp_path / "a.json", tmp_path / "a.md"
    r = invoke(
        "audit",
        digits_ckpt,
        *FAST,
        "--bootstrap",
        "200",
        "--metrics",
        "aopc,sufficiency",
        "--json",
        out,
        "--markdown",
        md,
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["intervals"]["level"] == 0.95 and doc["intervals"]["bootstrap"] == 200
    laya, ig = doc["methods"]["laya"], doc["methods"]["ig"]
    for metric in ("faithfulness", "deletion@1", "deletion@1_normalised", "aopc", "sufficiency@1"):
        block = laya["ci"][metric]
        assert block["ci_low"] <= laya[metric] <= block["ci_high"], metric
    assert laya["ci"]["faithfulness"]["n_defined"] == laya["defined"]
    assert ig["vs_laya"]["faithfulness"]["difference"] == pytest.approx(ig["faithfulness"] - laya["faithfulness"])
    assert "95% CI" in r.output and "paired difference from laya" in r.output
    text = md.read_text()
    assert "| 95% CI |" in text.replace("95% CI | ± std", "95% CI |") and "Paired difference from `laya`" in text
    assert "per_sample" in doc and len(unpack(doc["per_sample"], "ig")["faithfulness"]) == 120
    plain = invoke(
        "audit", digits_ckpt, *FAST, "--bootstrap", "50", "--json", out, "--overwrite"
    )  # deeper groups not computed
    assert plain.exit_code == 0, plain.output
    assert set(json.loads(out.read_text())["methods"]["laya"]["ci"]) == {
        "faithfulness",
        "deletion@1",
        "deletion@1_normalised",
    }


def test_ci_zero_turns_the_intervals_off(digits_ckpt, tmp_path):
    out = tmp_path / "a.json"
    r = invoke("audit", digits_ckpt, *FAST, "--ci", "0", "--json", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert "ci" not in doc["methods"]["laya"] and "intervals" not in doc and "95% CI" not in r.output
    assert "per_sample" in doc  # still written: a later --gate-on bound pairs against it


@pytest.mark.parametrize(("args", "fragment"), [(["--ci", "1.5"], "--ci"), (["--bootstrap", "0"], "--bootstrap")])
def test_bad_interval_options_are_usage_errors(digits_ckpt, args, fragment):
    assert_user_error(invoke("audit", digits_ckpt, *FAST, *args), fragment)


def test_report_html_shows_the_intervals(digits_ckpt, tmp_path):
    audit = tmp_path / "audit.json"
    assert invoke("audit", digits_ckpt, *FAST, "--bootstrap", "100", "--json", audit, "-q").exit_code == 0
    r = invoke("export", digits_ckpt, "--out", tmp_path / "export", "--audit", audit, "--no-plots", "-q")
    assert r.exit_code == 0, r.output
    html = (tmp_path / "export" / "report.html").read_text(encoding="utf-8")
    ci = json.loads(audit.read_text())["methods"]["laya"]["ci"]["faithfulness"]
    assert "95% CI" in html and f"[{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]" in html


def test_resampled_means_do_not_depend_on_the_chunking(monkeypatch):
    """Chunks bound the memory (draws × rows per matrix product); the resamples are the same, the means equal up
    to the matrix product's rounding."""
    from laya_cli.stats import bootstrap

    rng = np.random.default_rng(0)
    columns = {"a": rng.normal(size=300), "b": np.where(rng.random(300) < 0.2, np.nan, rng.normal(size=300))}
    whole = bootstrap.resampled_means(columns, 257, seed=4)
    monkeypatch.setattr(bootstrap, "CHUNK_CELLS", 7 * 300)  # 7 resamples per product
    chunked = bootstrap.resampled_means(columns, 257, seed=4)
    for k in columns:
        np.testing.assert_allclose(whole[k], chunked[k], rtol=1e-12, atol=1e-15)


def test_completeness_and_randomisation_intervals_match_a_by_hand_bootstrap():
    """IG's completeness (1 − mean |δ| / mean |Δf|) and the randomisation check (1 − mean ρ over the checked
    samples) get intervals too, when their groups are computed: the point value is the audit's, the bounds a
    by-hand percentile bootstrap of the same per-sample columns."""
    import torch
    from helpers import head_only_model

    from laya_cli.auditing.head_scope import run_audit
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.features.extraction import LayerFeatures
    from laya_cli.model.heads import HeadSettings, build_head

    torch.manual_seed(0)
    dims = [6, 5, 7]
    head = build_head("laya", dims, 3, HeadSettings(d_star=8, score_hidden=16)).eval()
    for p in head.parameters():
        p.data.mul_(3)
    feats = [torch.randn(60, d) for d in dims]
    model = head_only_model(head, [torch.zeros(d) for d in dims], 3)
    data = LayerFeatures(feats, torch.zeros(60, dtype=torch.long))
    settings = AuditSettings(metrics=("completeness", "randomisation"), randomisation_samples=40, batch_size=20,
                             ig_tol=0.0, steps=2, bootstrap=400)  # fmt: skip
    result = run_audit(model, data, ["laya", "ig"], settings)
    ig, laya = result.methods["ig"], result.methods["laya"]
    cols = result.columns["ig"]
    hand = _by_hand({"e": cols["completeness_error"], "f": cols["ig_effect"], "r": cols["randomised"]}, 400,
                    result.interval_settings["seed"])  # fmt: skip
    for metric, draws, point in (
        ("completeness", 1 - hand["e"] / hand["f"], ig.completeness),
        ("randomisation", 1 - hand["r"], ig.randomisation),
    ):
        got = ig.intervals[metric]
        assert got.estimate == pytest.approx(point, abs=1e-12)
        lo, hi = np.percentile(draws[np.isfinite(draws)], [2.5, 97.5])
        assert (got.low, got.high) == pytest.approx((lo, hi), abs=1e-12)
    assert int((~np.isnan(cols["randomised"])).sum()) == 40  # the checked samples only
    assert "completeness" not in laya.intervals and "randomisation" in laya.intervals
    assert "randomisation" in ig.vs_laya and "completeness" not in ig.vs_laya
    # not asked for: no columns, no intervals
    plain = run_audit(model, data, ["laya", "ig"], AuditSettings(ig_tol=0.0, steps=2, bootstrap=50))
    assert not {"completeness", "randomisation"} & set(plain.methods["ig"].intervals)
    assert not {"completeness_error", "ig_effect", "randomised"} & set(plain.columns["ig"])


def _one_at_a_time(columns: dict, level: float, n_boot: int, seed: int) -> dict:
    """``method_intervals`` as it was before its intervals were batched: one ``interval`` per metric and per
    difference from laya, each statistic evaluated on the means and on the draws apart, its own np.percentile."""
    columns = {m: masked(cols) for m, cols in columns.items()}
    flat = {f"{g}/{c}": np.asarray(v, dtype=np.float64) for g, cols in columns.items() for c, v in cols.items()}
    means = {k: column_mean(v) for k, v in flat.items()}
    draws = resampled_means(flat, n_boot, seed)

    def of(prefix, stat):
        return lambda m: stat({k[len(prefix) + 1 :]: v for k, v in m.items() if k.startswith(prefix + "/")})

    def has(cols, metric):
        return all(c in cols for c in STATISTICS[metric][2])

    out = {}
    for m, cols in columns.items():
        own, vs = {}, {}
        for metric, (count, stat, _) in STATISTICS.items():
            if not has(cols, metric):
                continue
            own[metric] = interval(of(m, stat), means, draws, level, int((~np.isnan(flat[f"{m}/{count}"])).sum()))
            ref = columns.get(REFERENCE)
            if m != REFERENCE and ref is not None and has(ref, metric):
                both = ~np.isnan(flat[f"{m}/{count}"]) & ~np.isnan(flat[f"{REFERENCE}/{count}"])
                vs[metric] = interval(
                    difference(of(m, stat), of(REFERENCE, stat)), means, draws, level, int(both.sum())
                )
        out[m] = {"intervals": own, "vs_laya": vs}
    return out


def _bits(x: float) -> bytes:
    """A float's bytes: NaN equals NaN, and 0.0 differs from -0.0 (equality of the bits, not of the values)."""
    return np.float64(x).tobytes()


def _same_intervals(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for m in want:
        for part in ("intervals", "vs_laya"):
            assert list(got[m][part]) == list(want[m][part]), (m, part)
            for metric, w in want[m][part].items():
                g = got[m][part][metric]
                assert [_bits(g.estimate), _bits(g.low), _bits(g.high)] == [
                    _bits(w.estimate), _bits(w.low), _bits(w.high)], (m, part, metric, g, w)  # fmt: skip
                assert (g.n_defined, g.level) == (w.n_defined, w.level)


def _audit_like(rng, n: int, methods=("laya", "ig", "gradxact", "random")) -> dict:
    """Every column of every metric, with undefined rows (NaN) in most, one all-NaN column, and a method whose
    columns give NaN draws on some resamples and inf draws."""
    oracle = rng.random(n) + 0.2
    common = {"oracle": oracle, "random": oracle * rng.random(n), "keep_oracle": rng.random(n),
              "keep_random": rng.random(n) * 0.5}  # fmt: skip
    out = {}
    for i, m in enumerate(methods):
        nan = rng.random(n) < 0.2 * i
        cols = {**common, "faithfulness": np.where(nan, np.nan, rng.normal(size=n)), "deletion@1": rng.random(n),
                "aopc": rng.random(n), "sufficiency@1": np.where(rng.random(n) < 0.3, np.nan, rng.random(n)),
                "randomised": np.where(rng.random(n) < 0.5, np.nan, rng.normal(size=n))}  # fmt: skip
        if m == "ig":
            cols["completeness_error"], cols["ig_effect"] = rng.random(n), np.where(rng.random(n) < 0.5, 0.0, 1.0)
        if m == "gradxact":
            cols["aopc"] = np.full(n, np.nan)  # never defined: NaN estimate and bounds
        if m == "random":  # defined on 2 rows: no defined row on some resamples (NaN draws); inf draws
            cols["randomised"] = np.where(np.arange(n) < 2, rng.normal(size=n), np.nan)
            cols["deletion@1"] = np.where(rng.random(n) < 0.1, np.inf, rng.random(n))
        out[m] = cols
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 40])
@pytest.mark.parametrize("seed", [0, 1])
def test_batched_intervals_are_those_of_one_interval_at_a_time_bit_for_bit(n, seed):
    """The intervals of all methods and metrics from one percentile call equal the per-interval reference (the
    old code) exactly: estimate, low and high to the bit, NaN where it was NaN, on columns with NaN rows, an
    all-NaN column, NaN and inf draws, one sample and two."""
    rng = np.random.default_rng(seed + 10 * n)
    columns = _audit_like(rng, n)
    for level, n_boot in ((0.95, 200), (0.9, 37), (0.95, 1)):
        got = method_intervals(columns, level, n_boot, seed)
        _same_intervals(got, _one_at_a_time(columns, level, n_boot, seed))
    without_laya = {m: c for m, c in columns.items() if m != "laya"}
    _same_intervals(method_intervals(without_laya, 0.95, 50, 3), _one_at_a_time(without_laya, 0.95, 50, 3))


def test_batched_intervals_meet_non_finite_draws_somewhere():
    """The case above does reach the rows done alone (NaN, inf and all-NaN draws) and the rows done together."""
    columns = _audit_like(np.random.default_rng(40), 40)
    flat = {f"{m}/{c}": v for m, cols in columns.items() for c, v in cols.items()}
    draws = resampled_means(flat, 200, 0)
    assert np.isinf(draws["random/deletion@1"]).any() and np.isnan(draws["gradxact/aopc"]).all()
    assert np.isnan(draws["random/randomised"]).any() and not np.isnan(draws["random/randomised"]).all()
    assert np.isfinite(draws["laya/faithfulness"]).all()


def test_percentile_intervals_per_row_equal_percentile_interval():
    rng = np.random.default_rng(5)
    draws = rng.normal(size=(9, 101))
    draws[1, 3] = np.nan
    draws[2, :] = np.nan
    draws[3, [4, 7]] = [np.inf, -np.inf]
    draws[4, :-1] = np.nan  # one finite draw
    for d in (draws, draws[:, :1], draws[:, :2], draws[:, :0], draws[:0]):
        got = percentile_intervals(d, 0.95)
        assert got.shape == (len(d), 2)
        for row, (lo, hi) in zip(d, got, strict=True):
            want = percentile_interval(row, 0.95)
            assert [_bits(lo), _bits(hi)] == [_bits(want[0]), _bits(want[1])]
