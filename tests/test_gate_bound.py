"""--gate-on bound (gates/significance.py, docs/ci.md): pass, fail and inconclusive verdicts from intervals, end
to end through `laya audit` (exit codes, the verdict line, JUnit, the JSON), and the usage errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from helpers import assert_user_error, invoke

from laya_cli.gates.checks import Check, verdict
from laya_cli.gates.significance import BoundSettings, drop_on_bound, threshold_on_bound
from laya_cli.stats.compact import encode, unpack

FAST = ["--samples", "150", "--steps", "4", "--randomisation-samples", "0", "--compare", "ig", "--bootstrap", "300"]


@pytest.fixture(scope="module")
def audited(digits_ckpt, tmp_path_factory):
    path = tmp_path_factory.mktemp("bound") / "base.json"
    r = invoke("audit", digits_ckpt, *FAST, "--json", path, "--quiet")
    assert r.exit_code == 0, r.output
    return path, json.loads(path.read_text())


def _check(gate="fail-under", measured=0.8, bar=0.7) -> Check:
    return Check(gate, "laya:faithfulness", "faithfulness", "laya", measured, ">= x", True, "m", bar=bar)


@pytest.mark.parametrize(
    ("low", "high", "word"), [(0.75, 0.85, "pass"), (0.6, 0.69, "fail"), (0.65, 0.8, "inconclusive")]
)
def test_a_threshold_is_decided_by_where_its_interval_lies(low, high, word):
    doc = {"methods": {"laya": {"ci": {"faithfulness": {"ci_low": low, "ci_high": high, "n_defined": 300}}}}}
    c = threshold_on_bound(_check(measured=(low + high) / 2), doc, 0.95)
    assert verdict([c]).word == word
    assert c.interval == (low, high) and word.upper() in c.message and "±" in c.message
    assert c.failed == (word == "fail") and c.inconclusive == (word == "inconclusive")


def test_a_threshold_without_an_interval_keeps_its_point_verdict():
    c = _check()
    assert threshold_on_bound(c, {"methods": {"laya": {}}}, 0.95) is c


def _columns_doc(faith: np.ndarray, index=None) -> dict:
    n = len(faith)
    block = {"common": {"oracle": encode(np.ones(n)), "random": encode(np.zeros(n))}, "methods": {}}
    block["methods"]["laya"] = {"faithfulness": encode(faith), "deletion@1": encode(np.full(n, 0.5))}
    return {"per_sample": block}


@pytest.mark.parametrize(
    ("shift", "noise", "word"), [(0.0, 0.01, "pass"), (-0.2, 0.01, "fail"), (-0.05, 0.3, "inconclusive")]
)
def test_a_drop_is_decided_by_the_paired_interval_of_the_change(shift, noise, word):
    rng = np.random.default_rng(0)
    base = rng.uniform(-0.5, 1, 400)
    now = np.clip(base + shift + rng.normal(0, noise, 400), -1, 1)
    c = Check("max-drop", "x", "faithfulness", "laya", 0.0, "r", True, "m", bar=0.05)
    out = drop_on_bound(c, _columns_doc(base), _columns_doc(now), BoundSettings(0.95, 500, 0))
    assert verdict([out]).word == word, out.message
    assert "smallest detectable drop" in out.message
    if word == "inconclusive":
        assert "would resolve" in out.message or "sits on the bar" in out.message


def test_inconclusive_threshold_end_to_end(digits_ckpt, audited, tmp_path):
    """A threshold at the estimate itself: its interval straddles it, so the gate cannot tell."""
    _, doc = audited
    est = doc["methods"]["laya"]["faithfulness"]
    xml, out = tmp_path / "j.xml", tmp_path / "a.json"
    args = ["audit", digits_ckpt, *FAST, "--fail-under", f"laya:faithfulness={est:.6f}", "--gate-on", "bound"]
    r = invoke(*args, "--junit", xml, "--json", out)
    assert r.exit_code == 1, r.output
    assert "laya audit: INCONCLUSIVE" in r.output and "inconclusive:" in r.output
    case = ET.parse(xml).getroot().find(".//testcase")
    assert case.find("failure").get("type") == "inconclusive"
    assert json.loads(out.read_text())["verdict"]["verdict"] == "inconclusive"
    r = invoke(*args, "--inconclusive-exit", "0")
    assert r.exit_code == 0 and "INCONCLUSIVE" in r.output
    # the same threshold on the point estimate: passes (the estimate equals it to 6 digits, rounded down)
    r = invoke("audit", digits_ckpt, *FAST, "--fail-under", f"laya:faithfulness={est - 1e-6:.6f}")
    assert r.exit_code == 0, r.output


def test_a_drop_gate_end_to_end_pass_and_inconclusive(digits_ckpt, audited, tmp_path):
    path, doc = audited
    # the same model on the same samples: the change is 0 on every sample, its interval [0, 0]: a conclusive pass
    r = invoke("audit", digits_ckpt, *FAST, "--baseline", path, "--max-drop", "faithfulness=0", "--gate-on", "bound")
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output and "smallest detectable drop ±0.0000" in r.output
    # a baseline whose per-sample scores scatter around the current ones: the interval straddles the bar
    noisy = json.loads(path.read_text())
    laya = unpack(noisy["per_sample"], "laya")["faithfulness"]
    rng = np.random.default_rng(1)
    noisy["per_sample"]["methods"]["laya"]["faithfulness"] = encode(laya + rng.normal(0, 0.5, len(laya)) - 0.0)
    base = tmp_path / "noisy.json"
    base.write_text(json.dumps(noisy))
    r = invoke(
        "audit", digits_ckpt, *FAST, "--baseline", base, "--max-drop", "laya:faithfulness=0.01", "--gate-on", "bound"
    )
    assert r.exit_code == 1 and "INCONCLUSIVE" in r.output, r.output


def test_bound_gates_need_intervals_and_paired_samples(digits_ckpt, audited, tmp_path):
    path, _ = audited
    assert_user_error(
        invoke("audit", digits_ckpt, *FAST, "--ci", "0", "--fail-under", "faithfulness=0.1", "--gate-on", "bound"),
        "--gate-on bound needs intervals",
    )
    assert_user_error(invoke("audit", digits_ckpt, *FAST, "--gate-on", "maybe"), "--gate-on")
    old = json.loads(path.read_text())
    del old["per_sample"]
    legacy = tmp_path / "old.json"
    legacy.write_text(json.dumps(old))
    assert_user_error(
        invoke(
            "audit", digits_ckpt, *FAST, "--baseline", legacy, "--max-drop", "faithfulness=0.02", "--gate-on", "bound"
        ),
        "per-sample scores",
    )


def test_wilson_matches_the_textbook_values():
    """Newcombe (1998), table I: 81 of 263 gives [0.2553, 0.3662]; 0 of 10 gives [0, 0.2775] (stays in [0, 1])."""
    from laya_cli.stats.proportion import newcombe_difference, wilson

    w = wilson(81, 263, 0.95)
    assert (round(w.low, 4), round(w.high, 4)) == (0.2553, 0.3662)
    z = wilson(0, 10, 0.95)
    assert z.low == 0 and round(z.high, 4) == 0.2775
    # Newcombe (1998) method 10, example (a): 56/70 − 48/80 = 0.2, interval [0.0524, 0.3339]
    d = newcombe_difference((48, 80), (56, 70), 0.95)
    assert (round(d.estimate, 4), round(d.low, 4), round(d.high, 4)) == (0.2, 0.0524, 0.3339)


@pytest.mark.parametrize(("bar", "word"), [(0.85, "pass"), (0.95, "fail"), (0.9, "inconclusive")])
def test_an_accuracy_gate_on_bound_reads_the_wilson_interval(digits_ckpt, audited, bar, word):
    doc = {"accuracy": 0.9, "n_samples": 500}  # Wilson 95%: [0.8706, 0.9233]
    c = Check("fail-under", "accuracy>=x", "accuracy", None, 0.9, ">= x", 0.9 >= bar, "m", bar=bar)
    out = threshold_on_bound(c, doc, 0.95)
    assert verdict([out]).word == word and "Wilson" in out.message and "at 500 samples" in out.message
    assert out.interval == pytest.approx((0.8706, 0.9233), abs=1e-4)
    if word != "inconclusive":
        return
    acc = audited[1]["accuracy"]
    # at the estimate itself the interval straddles the bar: inconclusive, end to end
    r = invoke("audit", digits_ckpt, *FAST, "--fail-under", f"accuracy={acc:.6f}", "--gate-on", "bound", "-q")
    assert r.exit_code == 1 and "INCONCLUSIVE" in r.output and "Wilson" in r.output, r.output


def test_an_accuracy_drop_on_bound_needs_no_per_sample_scores(digits_ckpt, tmp_path):
    """--no-per-sample: the JSON without its per-sample block; an accuracy --max-drop on bound still gates on it
    (Newcombe's interval needs only the counts), a faithfulness one says what the baseline lacks."""
    small, full = tmp_path / "small.json", tmp_path / "full.json"
    assert invoke("audit", digits_ckpt, *FAST, "--json", small, "--no-per-sample", "-q").exit_code == 0
    assert invoke("audit", digits_ckpt, *FAST, "--json", full, "-q").exit_code == 0
    doc = json.loads(small.read_text())
    assert "per_sample" not in doc and "per_sample" in json.loads(full.read_text())
    assert small.stat().st_size < full.stat().st_size and doc["methods"] == json.loads(full.read_text())["methods"]
    r = invoke("audit", digits_ckpt, *FAST, "--baseline", small, "--max-drop", "accuracy=0.5", "--gate-on", "bound")
    assert r.exit_code == 0 and "Newcombe" in r.output, r.output
    r = invoke("audit", digits_ckpt, *FAST, "--baseline", small, "--max-drop", "faithfulness=0.5", "--gate-on", "bound")
    assert_user_error(r, "--no-per-sample")


def test_by_class_tables_carry_intervals(digits_ckpt, tmp_path):
    md, out = tmp_path / "a.md", tmp_path / "a.json"
    r = invoke("audit", digits_ckpt, *FAST, "--by-class", "--markdown", md, "--json", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    for cls in doc["by_class"].values():
        ci = cls["methods"]["laya"]["ci"]["faithfulness"]
        assert ci["n_defined"] <= cls["n"] and ci["ci_low"] <= cls["methods"]["laya"]["faithfulness"] <= ci["ci_high"]
    assert "bootstrap over the class's samples" in md.read_text() and "95% CI" in r.output
