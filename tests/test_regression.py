"""CI gates: --baseline/--max-drop (regression.py), --junit (junit.py, validated against the JUnit schema),
$GITHUB_STEP_SUMMARY, --quiet's verdict line, and the bad input of each."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import assert_user_error, invoke

from laya_cli.gates.checks import Check, verdict
from laya_cli.gates.junit import junit_xml
from laya_cli.gates.regression import (
    MaxDrop,
    check_settings,
    compare,
    parse_max_drop,
    read_audit_json,
    settings_differences,
)
from laya_cli.runtime.errors import LayaError

XSD = Path(__file__).parent / "data" / "junit-10.xsd"
FAST = ["--samples", "60", "--steps", "4"]


def schema():
    xmlschema = pytest.importorskip(
        "xmlschema", reason="xmlschema validates the JUnit file (pip install 'laya-audit[test]')"
    )
    return xmlschema.XMLSchema(str(XSD))


def doc(**metrics) -> dict:
    """A minimal audit JSON: methods laya/ig/random with the given faithfulness values."""
    methods = {}
    for m, f in {"laya": 0.80, "ig": 0.85, "random": 0.0, **metrics}.items():
        methods[m] = {"faithfulness": f, "deletion@1": 0.5, "deletion@1_normalised": 0.9, "available": True}
    return {
        "settings": {
            "dataset": "digits",
            "samples": 200,
            "seed": 0,
            "ablation": "mean",
            "target": "predicted",
            "reduce": "sum",
            "steps": 32,
            "methods": list(methods),
            "head": "laya",
            "layers": 3,
        },
        "n_samples": 200,
        "accuracy": 0.95,
        "layers": ["blocks.0", "blocks.1", "blocks.2"],
        "methods": methods,
    }


# --------------------------------------------------------------------------- --max-drop, by hand


def test_parse_max_drop_absolute_relative_method_and_model():
    rules = parse_max_drop(
        ["faithfulness=0.02,ig:deletion@1=5%", "accuracy=0.01,all:aopc=0.1"], ["laya", "ig", "random"]
    )
    assert rules == [
        MaxDrop("faithfulness", 0.02, method="laya"),  # unqualified: the model's own attribution
        MaxDrop("deletion@1", 0.05, True, "ig"),
        MaxDrop("accuracy", 0.01),
        MaxDrop("aopc", 0.1),  # all: every method but random
    ]
    assert [str(r) for r in rules] == ["laya:faithfulness=0.02", "ig:deletion@1=5%", "accuracy=0.01", "all:aopc=0.1"]
    assert rules[1].allowed(-0.4) == pytest.approx(0.02)  # relative to the magnitude of the baseline


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ("faithfulnes=0.1", "unknown --max-drop metric 'faithfulnes': did you mean faithfulness"),
        ("lya:faithfulness=0.1", "unknown --max-drop method 'lya'"),
        ("faithfulness", "bad --max-drop 'faithfulness'"),
        ("faithfulness=-0.1", "≥ 0"),
        ("faithfulness=abc", "'abc' is not a number"),
        ("laya:accuracy=0.1", "belongs to the model"),
        ("saliency:faithfulness=0.1", "not audited; add --compare saliency"),
    ],
)
def test_parse_max_drop_errors(spec, fragment):
    with pytest.raises(LayaError, match=None) as e:
        parse_max_drop(spec, ["laya", "ig", "random"])
    assert fragment in str(e.value)


def test_compare_absolute_and_relative_by_hand():
    base, now = doc(laya=0.80, ig=0.85), doc(laya=0.77, ig=0.84)
    c = compare(base, now, parse_max_drop("all:faithfulness=0.02,ig:faithfulness=1%"))
    by = {c_.name: c_ for c_ in c.checks}
    assert set(by) == {"laya:faithfulness drop<=0.02", "ig:faithfulness drop<=0.02", "ig:faithfulness drop<=1%"}
    assert by["laya:faithfulness drop<=0.02"].failed  # 0.80 -> 0.77: 0.03 > 0.02
    assert by["ig:faithfulness drop<=0.02"].passed  # 0.85 -> 0.84: 0.01
    assert by["ig:faithfulness drop<=1%"].failed  # 0.01 > 1 % of 0.85 = 0.0085
    assert "random" not in {c_.method for c_ in c.checks}  # a method-less rule skips random
    assert c.methods["laya"]["faithfulness"]["change"] == pytest.approx(-0.03)
    assert c.methods["laya"]["faithfulness"]["failed"] and not c.methods["ig"]["deletion@1"]["failed"]
    assert not c.passed and "0.8000 -> 0.7700" in by["laya:faithfulness drop<=0.02"].message


def with_network(head: dict, **faithfulness) -> dict:
    """``head`` with a network scope (``--scope both``): methods laya/ig/random with the given faithfulness."""
    out = copy.deepcopy(head)
    out["network"] = {"methods": doc(**faithfulness)["methods"], "patched": "prefix", "reference": "mean"}
    return out


def test_network_scope_max_drop_by_hand():
    base = with_network(doc(), laya=0.70, ig=0.95)
    now = with_network(doc(), laya=0.60, ig=0.95)
    rules = parse_max_drop("network:all:faithfulness=0.05,all:faithfulness=0.05", ["laya", "ig", "random"], "both")
    assert [str(r) for r in rules] == ["network:all:faithfulness=0.05", "all:faithfulness=0.05"]
    assert parse_max_drop("Network:IG:faithfulness=0.05", ["laya", "ig"], "network") == [
        MaxDrop("faithfulness", 0.05, method="ig", scope="network")
    ]  # names are case-insensitive
    c = compare(base, now, rules)
    by = {c_.name: c_ for c_ in c.checks}
    assert set(by) == {
        "network:laya:faithfulness drop<=0.05",
        "network:ig:faithfulness drop<=0.05",
        "laya:faithfulness drop<=0.05",
        "ig:faithfulness drop<=0.05",
    }  # random skipped at both scopes
    assert by["network:laya:faithfulness drop<=0.05"].failed and by["network:ig:faithfulness drop<=0.05"].passed
    assert by["laya:faithfulness drop<=0.05"].passed  # the head scope did not move
    assert c.methods["network:laya"]["faithfulness"]["change"] == pytest.approx(-0.10)
    # a baseline without the network scope: each network rule is a failed check that says why
    c = compare(doc(), now, parse_max_drop("network:ig:faithfulness=0.05", ["laya", "ig", "random"], "both"))
    assert [c_.message for c_ in c.checks if c_.failed] == [
        "network:ig: faithfulness is not in both audits (required by --max-drop network:ig:faithfulness=0.05)"
    ]
    # a head-scope baseline compared with a head-scope audit: no network keys anywhere
    assert not any(m.startswith("network:") for m in compare(doc(), doc(), []).methods)


@pytest.mark.parametrize(
    "spec,scope,fragment",
    [
        ("network:faithfulness=0.1", "head", "add --scope network or --scope both"),
        ("network:aopc=0.1", "both", "aopc is not computed at network scope"),
    ],
)
def test_network_max_drop_errors(spec, scope, fragment):
    with pytest.raises(LayaError) as e:
        parse_max_drop(spec, ["laya", "ig", "random"], scope)
    assert fragment in str(e.value) and "--max-drop" in str(e.value)


def test_an_unqualified_item_checks_the_network_scope_when_the_audit_ran_there_alone():
    """--scope network (a network-aligned checkpoint's default question): ``faithfulness=…`` checks its results."""
    from laya_cli.gates.thresholds import parse_thresholds

    assert parse_max_drop("faithfulness=0.1", ["laya"], "network")[0].scope == "network"
    assert parse_thresholds("faithfulness=0.1", ["laya"], "network")[0].scope == "network"
    assert parse_thresholds("faithfulness=0.1", ["laya"], "both")[0].scope == "head"
    assert str(parse_thresholds("faithfulness=0.1", ["laya"], "network")[0]) == "network:laya:faithfulness=0.1"


def test_a_drop_equal_to_the_allowance_passes_and_a_rise_always_passes():
    c = compare(doc(laya=0.5), doc(laya=0.25), [MaxDrop("faithfulness", 0.25, method="laya")])
    assert c.passed
    c = compare(doc(laya=0.5), doc(laya=0.9), [MaxDrop("faithfulness", 0.0, method="laya")])
    assert c.passed and "rose 0.4000" in c.checks[0].message


def test_undefined_values():
    base, now = doc(), doc()
    base["methods"]["laya"]["faithfulness"] = None  # undefined in the baseline: nothing to compare
    now["methods"]["ig"]["faithfulness"] = None  # undefined now, defined before: a failure
    c = compare(base, now, [MaxDrop("faithfulness", 0.1)])
    by = {x.method: x for x in c.checks}
    assert by["laya"].skipped and not by["laya"].failed
    assert by["ig"].failed and "undefined now" in by["ig"].message


def test_only_metrics_present_in_both_are_compared():
    base, now = doc(), doc(saliency=0.7)
    now["methods"]["laya"]["new_metric"] = 1.0  # a newer laya may record more
    c = compare(base, now, [MaxDrop("faithfulness", 0.1)])
    assert "saliency" not in c.methods and "new_metric" not in c.methods["laya"]
    assert {x.method for x in c.checks} == {"laya", "ig"}


def test_settings_that_must_match_are_each_named():
    base, now = doc(), doc()
    now["settings"].update(samples=100, ablation="zero", steps=8)
    now["n_samples"] = 100
    now["layers"] = ["a", "b", "c"]
    diffs = settings_differences(base, now)
    assert [d.split()[0] for d in diffs] == ["samples", "ablation", "steps", "layers", "n_samples"]
    with pytest.raises(LayaError) as e:
        check_settings(base, now, allow_change=False, baseline_path="main.json")
    assert (
        "main.json" in str(e.value)
        and "ablation mean -> zero" in str(e.value)
        and "--allow-settings-change" in str(e.value)
    )
    assert check_settings(base, now, allow_change=True) == diffs
    same = doc()
    same["settings"]["methods"] = list(reversed(same["settings"]["methods"]))  # the order methods were listed in
    same["settings"]["device"], same["settings"]["model"] = "cuda", "other.pt"  # neither changes the numbers' meaning
    assert settings_differences(base, same) == []


# --------------------------------------------------------------------------- JUnit


def test_junit_validates_against_the_schema_and_carries_measured_and_required():
    checks = [
        Check(
            "fail-under",
            "ig:faithfulness>=0.8",
            "faithfulness",
            "ig",
            0.62,
            ">= 0.8",
            False,
            "ig: faithfulness 0.6200 < 0.8",
        ),
        Check(
            "max-drop",
            "laya:faithfulness drop<=0.02",
            "faithfulness",
            "laya",
            0.9,
            ">= 0.8 (baseline 0.82 - 0.02)",
            True,
            "laya: faithfulness rose 0.08 (0.82 -> 0.90), within the allowed 0.02",
        ),
        Check(
            "max-drop",
            "gradxact:faithfulness drop<=0.02",
            "faithfulness",
            "gradxact",
            None,
            "a defined baseline value",
            True,
            "no baseline value",
            skipped=True,
        ),
    ]
    text = junit_xml(checks, properties={"model": "m.pt", "note": '<&">'}, seconds=1234.5)
    schema().validate(text)
    root = ET.fromstring(text)
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "3",
        "1",
        "0",
        "1",
    )
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == ["laya.fail_under", "laya.max_drop", "laya.max_drop"]
    failure = cases[0].find("failure")
    assert failure.get("message") == "ig: faithfulness 0.6200 < 0.8"
    assert "measured: 0.62" in failure.text and "required: >= 0.8" in failure.text
    assert cases[1].find("failure") is None and cases[2].find("skipped") is not None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props == {"model": "m.pt", "note": '<&">'}
    assert not schema().is_valid("<testsuites><testsuite name='x'/></testsuites>")  # the schema does reject


def test_no_checks_is_an_empty_valid_suite():
    text = junit_xml([])
    schema().validate(text)
    assert ET.fromstring(text).find("testsuite").get("tests") == "0"


# --------------------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def baseline(digits_ckpt, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("baseline") / "main-audit.json"
    r = invoke("audit", digits_ckpt, *FAST, "--json", path, "-q")
    assert r.exit_code == 0, r.output
    return path


def doctored(baseline: Path, tmp_path: Path, **raise_by) -> Path:
    """The baseline with some methods' faithfulness raised: the same model now looks like a regression."""
    d = json.loads(baseline.read_text())
    for m, by in raise_by.items():
        d["methods"][m]["faithfulness"] += by
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(d))
    return path


def test_passing_gate_against_itself(digits_ckpt, baseline, tmp_path):
    junit, js, md = tmp_path / "j.xml", tmp_path / "a.json", tmp_path / "a.md"
    gate = ("--baseline", baseline, "--max-drop", "all:faithfulness=0,accuracy=0")
    r = invoke("audit", digits_ckpt, *FAST, *gate, "--junit", junit, "--json", js, "--markdown", md)
    assert r.exit_code == 0, r.output
    assert "base" in r.stdout and "Δ" in r.stdout and "+0.000" in r.stdout and "baseline" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("laya audit: PASS · 4 of 4 gate checks passed")
    d = json.loads(js.read_text())
    assert d["baseline"]["passed"] is True and d["verdict"] == {
        "passed": True,
        "verdict": "pass",
        "checks": 4,
        "failed": 0,
        "inconclusive": 0,
        "skipped": 0,
    }
    assert d["baseline"]["methods"]["laya"]["faithfulness"]["change"] == 0
    schema().validate(junit.read_text())
    assert "| faithfulness | baseline | Δ |" in md.read_text()


def test_failing_gate_names_each_metric_that_dropped(digits_ckpt, baseline, tmp_path):
    base = doctored(baseline, tmp_path, laya=0.05, ig=0.015)
    junit, js, md = tmp_path / "j.xml", tmp_path / "a.json", tmp_path / "a.md"
    gate = ("--baseline", base, "--max-drop", "all:faithfulness=0.02", "--fail-under", "all:faithfulness=-1")
    r = invoke("audit", digits_ckpt, *FAST, *gate, "--junit", junit, "--json", js, "--markdown", md)
    assert r.exit_code == 1, r.output
    misses = [line for line in r.stderr.splitlines() if line.startswith("max-drop:")]
    assert len(misses) == 1 and misses[0].startswith("max-drop: laya: faithfulness dropped 0.0500"), r.stderr
    assert "fail-under: all 1 threshold(s) met" in r.stderr
    verdict_line = r.stdout.strip().splitlines()[-1]
    assert verdict_line.startswith("laya audit: FAIL · 1 of 6 gate checks failed: laya: faithfulness dropped 0.0500")
    root = ET.fromstring(junit.read_text())
    schema().validate(junit.read_text())
    failed = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed == ["laya:faithfulness drop<=0.02"]
    assert root.find("testsuite").get("tests") == "6"  # 3 fail-under (laya, ig, gradxact) + 3 max-drop
    d = json.loads(js.read_text())  # outputs are still written, for the CI summary
    assert d["verdict"]["passed"] is False and d["baseline"]["methods"]["laya"]["faithfulness"]["failed"] is True
    text = md.read_text()
    assert "**max-drop: dropped too far**" in text and "✗" in text


def test_quiet_prints_only_the_verdict_line(digits_ckpt, baseline, tmp_path):
    r = invoke(
        "audit",
        digits_ckpt,
        *FAST,
        "--baseline",
        doctored(baseline, tmp_path, laya=0.05),
        "--max-drop",
        "laya:faithfulness=0.02",
        "-q",
    )
    assert r.exit_code == 1
    assert r.stderr == "" and len(r.stdout.splitlines()) == 1, r.output
    assert r.stdout.startswith("laya audit: FAIL · 1 of 1 gate checks failed: laya: faithfulness dropped")
    r = invoke("audit", digits_ckpt, *FAST, "-q")
    assert r.exit_code == 0 and r.stdout == "laya audit: PASS · 60 samples audited · no gate checks\n", r.output


def test_step_summary_is_appended_without_a_flag(digits_ckpt, baseline, tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("## earlier step\n")
    r = invoke(
        "audit",
        digits_ckpt,
        *FAST,
        "--baseline",
        baseline,
        "--max-drop",
        "faithfulness=0.02",
        "-q",
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.exit_code == 0, r.output
    text = summary.read_text()
    assert text.startswith("## earlier step\n### laya audit\n")
    assert (
        "| method | faithfulness | baseline | Δ |" in text and "max-drop: no metric dropped more than allowed" in text
    )


def test_settings_mismatch_is_exit_2_before_the_work_unless_allowed(digits_ckpt, baseline, tmp_path):
    js = tmp_path / "a.json"
    r = invoke(
        "audit", digits_ckpt, "--samples", 30, "--steps", 8, "--compare", "ig", "--baseline", baseline, "--json", js
    )
    assert_user_error(
        r,
        "was audited with other settings",
        "samples 60 -> 30",
        "steps 4 -> 8",
        "methods gradxact,ig,laya,random -> ig,laya,random",
        "--allow-settings-change",
    )
    assert not js.exists()
    r = invoke(
        "audit",
        digits_ckpt,
        "--samples",
        30,
        "--steps",
        4,
        "--baseline",
        baseline,
        "--allow-settings-change",
        "--max-drop",
        "accuracy=1",
        "--json",
        js,
    )
    assert r.exit_code == 0, r.output
    assert "settings changed (allowed): samples 60 -> 30" in " ".join(r.stdout.split())
    assert json.loads(js.read_text())["baseline"]["settings_changed"] == ["samples 60 -> 30", "n_samples 60 -> 30"]


def test_bad_baseline_and_gate_input(digits_ckpt, baseline, tmp_path):
    js = tmp_path / "out.json"
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bench.json").write_text(json.dumps({"request": {}, "heads": {}}))
    (tmp_path / "text.md").write_text("### laya audit\n")
    cases = [
        (["--baseline", tmp_path / "missing.json"], ["no such file"]),
        (["--baseline", tmp_path / "list.json"], ["is not a laya audit JSON"]),
        (["--baseline", tmp_path / "bench.json"], ["is not a laya audit JSON", "settings is missing"]),
        (["--baseline", tmp_path / "text.md"], ["is not JSON"]),
        (["--baseline", tmp_path], ["is a directory"]),
        (
            ["--baseline", baseline, "--max-drop", "faithfulnes=0.1"],
            ["unknown --max-drop metric", "did you mean faithfulness"],
        ),
        (["--max-drop", "faithfulness=0.1"], ["--max-drop needs --baseline"]),
        (["--baseline", baseline, "--junit", tmp_path / "no" / "j.xml"], ["cannot write", "does not exist"]),
        (["--junit", tmp_path], ["cannot write", "is a directory"]),
    ]
    for args, fragments in cases:
        assert_user_error(invoke("audit", digits_ckpt, *FAST, "--json", js, *args), *fragments)
    assert not js.exists()
    with pytest.raises(LayaError, match="is not a laya audit JSON"):
        read_audit_json(tmp_path / "list.json")


def test_verdict_counts():
    ok = Check("fail-under", "a", "faithfulness", "laya", 1.0, ">= 0", True, "ok")
    bad = Check("max-drop", "b", "faithfulness", "ig", 0.0, ">= 1", False, "bad")
    skip = Check("max-drop", "c", "faithfulness", "ig", None, "x", True, "skip", skipped=True)
    v = verdict([ok, bad, skip])
    assert (v.passed, v.word, len(v.failures), len(v.skipped)) == (False, "fail", 1, 1)
    assert verdict([ok, skip]).to_dict() == {
        "passed": True,
        "verdict": "pass",
        "checks": 2,
        "failed": 0,
        "inconclusive": 0,
        "skipped": 1,
    }
    assert copy.deepcopy(v) == v
