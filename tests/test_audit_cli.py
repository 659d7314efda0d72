"""`laya audit` from the outside: table, JSON, Markdown, gating, every head kind, bad input; CliRunner and
subprocess."""

import json

import pytest
from helpers import assert_user_error, invoke, run_laya

ALL = ["laya", "ig", "gradxact", "atp", "saliency", "contrib", "global", "random"]
METHOD_KEYS = {
    "faithfulness",
    "faithfulness_std",
    "undefined",
    "defined",
    "deletion@1",
    "deletion@1_oracle",
    "deletion@1_random",
    "deletion@1_normalised",
    "available",
    "note",
    "degenerate",
    "undefined_by_ties",
    "reference",  # computes the effect itself another way (IG here): a check of the audit, not a rival
}
INTERVAL_KEYS = {"ci_level", "ci", "vs_laya"}  # --ci (on by default): docs/metrics.md, "Intervals"
DEEPER_KEYS = {
    "aopc",
    "aopc_std",
    "aopc_undefined",
    "deletion_curve",
    "sufficiency@1",
    "sufficiency@1_oracle",
    "sufficiency@1_random",
    "sufficiency@1_normalised",
    "sufficiency@1_undefined",
    "insertion_curve",
    "completeness",
    "completeness_error",
    "completeness_effect",
    "completeness_flagged",
    "randomisation",
    "randomisation_spearman",
    "randomisation_undefined",
    "randomisation_flagged",
    "randomisation_cascade",
}


def audit(*args):
    return invoke("audit", *args)


def test_audit_table_json_and_markdown(digits_ckpt, tmp_path):
    js, md = tmp_path / "audit.json", tmp_path / "audit.md"
    result = audit(
        digits_ckpt, "--compare", "all", "--samples", 120, "--by-class", "--json", js, "--markdown", md, "--steps", 8
    )
    assert result.exit_code == 0, result.output
    for m in ALL:
        assert m in result.stdout
    assert "faithfulness" in result.stdout and "deletion@1" in result.stdout and "ablation mean" in result.stdout
    doc = json.loads(js.read_text())
    assert list(doc["methods"]) == ALL
    # the deeper metrics only on request (--metrics, or a gate naming one); IG also says which steps it took
    assert all(set(v) - {"ig_steps"} == METHOD_KEYS | INTERVAL_KEYS for v in doc["methods"].values())
    assert doc["computed_metrics"] == ["faithfulness", "deletion@1", "deletion@1_normalised"]
    deeper = audit(
        digits_ckpt, "--compare", "all", "--samples", 40, "--json", js, "--steps", 8, "--metrics", "all", "--overwrite"
    )
    assert deeper.exit_code == 0, deeper.output
    assert all(
        set(v) - {"ig_steps"} == METHOD_KEYS | DEEPER_KEYS | INTERVAL_KEYS
        for v in json.loads(js.read_text())["methods"].values()
    )
    s = doc["settings"]
    assert (s["samples"], s["steps"], s["ablation"], s["target"], s["reduce"], s["head"]) == (
        120,
        8,
        "mean",
        "predicted",
        "sum",
        "laya",
    )
    assert s["model"] == str(digits_ckpt) and s["dataset"] == "digits" and s["methods"] == ALL
    assert doc["n_samples"] == 120 and 0.8 < doc["accuracy"] <= 1
    assert sum(c["n"] for c in doc["by_class"].values()) == 120 and len(doc["by_class"]) == 10
    assert doc["fail_under"] == {"thresholds": [], "misses": [], "passed": True}
    m = doc["methods"]
    # sanity ranges (docs/metrics.md): the trained head and IG are faithful, random is not
    assert m["laya"]["faithfulness"] > 0.5 and m["ig"]["faithfulness"] > 0.5
    assert abs(m["random"]["faithfulness"]) < 0.25
    assert m["laya"]["deletion@1"] <= m["laya"]["deletion@1_oracle"] + 1e-9
    text = md.read_text()
    assert "| method | faithfulness |" in text and "| `ig` |" in text and "**" in text
    assert "Faithfulness by class" in text


def test_metrics_columns_and_gates_on_the_deeper_metrics(digits_ckpt, tmp_path):
    plain = audit(digits_ckpt, "--samples", 40, "--steps", 4)
    assert plain.exit_code == 0 and "aopc" not in plain.stdout and "randomisation" not in plain.stdout
    js, md = tmp_path / "a.json", tmp_path / "a.md"
    full = audit(
        digits_ckpt,
        "--samples",
        40,
        "--steps",
        4,
        "--metrics",
        "all",
        "--json",
        js,
        "--markdown",
        md,
        "--fail-under",
        "ig:completeness=-100,aopc=-1,all:randomisation=3",
    )  # not -q: that prints only the verdict
    assert full.exit_code == 1, full.output
    for header in ("aopc", "suff@1", "completeness", "randomisation"):
        assert header in full.stdout and f" {header} |" in md.read_text()
    assert "deeper metrics" in full.stdout and "! flagged" in full.stdout
    misses = [line for line in full.stderr.splitlines() if line.startswith("fail-under:")]
    assert [line.split()[1] for line in misses] == ["laya:", "ig:", "gradxact:"]  # randomisation < 3, nothing else
    doc = json.loads(js.read_text())
    assert doc["randomisation_stages"] == ["classifier", "scorer", "adapters"]
    assert doc["methods"]["random"]["randomisation_flagged"] is True
    bad = audit(digits_ckpt, "--metrics", "aopc,suficiency")
    assert_user_error(bad, "unknown --metrics group 'suficiency'")


def test_fail_under_exits_1_naming_each_miss(digits_ckpt, tmp_path):
    ok = audit(digits_ckpt, "--samples", 60, "--steps", 4, "--fail-under", "faithfulness=-1")
    assert ok.exit_code == 0, ok.output
    assert "threshold(s) met" in ok.stderr
    js, md = tmp_path / "a.json", tmp_path / "a.md"
    miss = audit(
        digits_ckpt,
        "--samples",
        60,
        "--steps",
        4,
        "--fail-under",
        "all:faithfulness=1.01",
        "--fail-under",
        "random:deletion@1=5,accuracy=0",
        "--json",
        js,
        "--markdown",
        md,
    )
    assert miss.exit_code == 1, miss.output
    lines = [line for line in miss.stderr.splitlines() if line.startswith("fail-under:")]
    assert [line.split()[1] for line in lines] == ["laya:", "ig:", "gradxact:", "random:"]
    doc = json.loads(js.read_text())  # outputs are still written for the CI summary
    assert doc["fail_under"]["passed"] is False and len(doc["fail_under"]["misses"]) == 4
    assert doc["settings"]["fail_under"] == ["all:faithfulness=1.01", "random:deletion@1=5", "accuracy=0"]
    assert "fail-under: missed" in md.read_text()


def test_other_settings_are_recorded(digits_ckpt, tmp_path):
    js = tmp_path / "a.json"
    result = audit(
        digits_ckpt,
        "--dataset",
        "digits",
        "--samples",
        50,
        "--seed",
        3,
        "--ablation",
        "zero",
        "--target",
        "label",
        "--reduce",
        "abs",
        "--steps",
        4,
        "--internal-batch-size",
        16,
        "--batch-size",
        20,
        "--compare",
        "ig,saliency",
        "--json",
        js,
        "-q",
    )
    assert result.exit_code == 0, result.output
    s = json.loads(js.read_text())["settings"]
    assert (s["ablation"], s["target"], s["reduce"], s["internal_batch_size"], s["batch_size"], s["seed"]) == (
        "zero",
        "label",
        "abs",
        16,
        20,
        3,
    )


@pytest.mark.parametrize("kind", ["laya", "last", "concat", "scalarmix"])
def test_every_head_kind_audits(digits_ckpts, tmp_path, kind):
    js = tmp_path / "a.json"
    ablation = "mask" if kind == "scalarmix" else "mean"
    result = audit(
        digits_ckpts[kind], "--compare", "all", "--samples", 60, "--steps", 4, "--ablation", ablation, "--json", js
    )
    assert result.exit_code == 0, result.output
    m = json.loads(js.read_text())["methods"]
    intrinsic = {"laya": {"laya", "contrib", "global"}, "scalarmix": {"laya", "global"}}.get(kind, set())
    for name in ALL:
        expected = name in intrinsic or name not in ("laya", "contrib", "global")
        assert m[name]["available"] is expected, name
        if not expected:
            assert m[name]["faithfulness"] is None and f"the {kind} head" in m[name]["note"]
            assert "undefined" in result.stderr
    assert m["ig"]["deletion@1"] is not None


def test_few_layers_are_warned_about(tmp_path):
    from helpers import train_digits

    ckpt = train_digits(tmp_path / "two.pt", epochs=1, layers=["blocks.1", "blocks.2"])
    result = audit(ckpt, "--samples", 30, "--steps", 4)
    assert result.exit_code == 0, result.output
    assert "only 2 layers" in " ".join(result.stderr.split())


def test_mask_ablation_on_a_head_without_weights_is_a_user_error(digits_ckpts):
    assert_user_error(
        audit(digits_ckpts["concat"], "--ablation", "mask", "--samples", 10),
        "--ablation mask needs a head with layer weights",
    )


BAD = [
    (["--compare", "ig,gradx"], ["unknown method 'gradx'", "did you mean gradxact"]),
    (["--compare", "integrated"], ["unknown method 'integrated'"]),
    (["--fail-under", "faithfulness>0.7"], ["bad --fail-under", "METHOD:METRIC=VALUE"]),
    (["--fail-under", "ig:faithfulness=high"], ["not a number"]),
    (["--fail-under", "faithfulnes=0.7"], ["did you mean faithfulness"]),
    (["--fail-under", "saliency:faithfulness=0.7"], ["not audited; add --compare saliency"]),
    (["--samples", "0"], ["--samples must be at least 1, got 0"]),
    (["--samples", "-3"], ["--samples must be at least 1, got -3"]),
    (["--ablation", "meen"], ["unknown --ablation 'meen'", "did you mean mean"]),
    (["--target", "lable"], ["did you mean label"]),
    (["--reduce", "l1"], ["unknown --reduce"]),
    (["--steps", "0"], ["--steps must be at least 1"]),
    (["--device", "tpu"], ["--device must be auto, cpu, cuda or mps"]),
    (["--json", "/no/such/dir/a.json"], ["cannot write", "does not exist"]),
]


@pytest.mark.parametrize("args,fragments", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(digits_ckpt, args, fragments):
    assert_user_error(audit(digits_ckpt, *args), *fragments)


def test_not_a_checkpoint(tmp_path):
    junk = tmp_path / "model.pt"
    junk.write_text("definitely not a checkpoint")
    assert_user_error(audit(junk), "checkpoint", "model.pt")
    assert_user_error(audit(tmp_path / "missing.pt"), "checkpoint not found")


def test_classes_that_do_not_match_the_data(digits_ckpt, image_folder):
    assert_user_error(
        audit(digits_ckpt, "--dataset", f"folder:{image_folder}"), "has 3 classes but the checkpoint was trained on 10"
    )


def test_subprocess_audit_gates_with_real_exit_codes(digits_ckpt, tmp_path):
    js = tmp_path / "a.json"
    ok = run_laya(
        "audit",
        digits_ckpt,
        "--samples",
        40,
        "--compare",
        "ig",
        "--steps",
        4,
        "--json",
        js,
        "--fail-under",
        "ig:faithfulness=-1",
        "-q",
    )
    assert ok.returncode == 0, ok.stderr
    assert "laya audit" in ok.stdout and json.loads(js.read_text())["fail_under"]["passed"] is True
    bad = run_laya("audit", digits_ckpt, "--compare", "ig", "--fail-under", "ig:faithfulness=")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("error: bad --fail-under")


@pytest.mark.slow
def test_speed_benchmark_runs_and_reports_ratios(monkeypatch):
    from benchmarks.audit_speed import main

    out = main(
        [
            "--images",
            "4",
            "--repeats",
            "1",
            "--steps",
            "4",
            "--naive-blocks",
            "1",
            "--naive-images",
            "1",
            "--device",
            "cpu",
        ]
    )
    assert out["audit_over_plain"] > 0 and out["naive_over_audit"] > 0  # ratios only; speed is judged by the benchmarks
    assert out["naive_blocks"] == [6] and out["naive_images"] == 1


def test_audit_and_export_reuse_the_test_features_training_extracted(tmp_path, image_folder):
    """One feature key for train, audit and export: the frozen backbone runs once per split."""
    ckpt = tmp_path / "vit.pt"
    trained = invoke(
        "train",
        "--backbone",
        "timm:vit_tiny_patch16_224",
        "--no-pretrained",
        "--dataset",
        f"folder:{image_folder}",
        "--epochs",
        "1",
        "--out",
        ckpt,
    )
    assert trained.exit_code == 0, trained.output
    assert "reusing" not in trained.output
    audited = audit(ckpt, "--compare", "", "--samples", 5)
    assert audited.exit_code == 0, audited.output
    assert "reusing cached test features" in audited.output
    exported = invoke("export", ckpt, "--out", tmp_path / "exp", "--no-plots")
    assert exported.exit_code == 0, exported.output
    assert "reusing cached test features" in exported.output


def test_method_and_setting_names_are_case_insensitive(digits_ckpt, tmp_path):
    js = tmp_path / "a.json"
    result = audit(
        digits_ckpt,
        "--compare",
        "IG,GradXAct",
        "--ablation",
        "MEAN",
        "--target",
        "Predicted",
        "--samples",
        30,
        "--steps",
        4,
        "--json",
        js,
        "--fail-under",
        "IG:faithfulness=-1",
        "-q",
    )
    assert result.exit_code == 0, result.output
    settings = json.loads(js.read_text())["settings"]
    assert settings["methods"] == ["laya", "ig", "gradxact", "random"] and settings["ablation"] == "mean"
    assert settings["target"] == "predicted"


def test_the_caption_names_ig_settings_only_when_ig_ran(digits_ckpt):
    without = audit(digits_ckpt, "--compare", "gradxact", "--samples", 30)
    assert without.exit_code == 0, without.output
    assert "IG steps" not in without.stdout and "ablation mean" in " ".join(without.stdout.split())
    with_ig = audit(digits_ckpt, "--compare", "ig", "--samples", 30, "--steps", 4)
    assert "IG steps ≤ 4 (--ig-tol 0.001)" in " ".join(with_ig.stdout.split())
    fixed = audit(digits_ckpt, "--compare", "ig", "--samples", 30, "--steps", 4, "--ig-tol", 0)
    assert "IG steps 4 " in " ".join(fixed.stdout.split()) + " "
