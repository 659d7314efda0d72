"""``laya bench --task lm``: the LAYA head and the tuned lens trained with every seed and objective; each figure's
mean over seeds checked against the runs' own checkpoints and ``laya audit``, the reuse of finished runs, and the
bad inputs (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import statistics

import pytest

from laya_cli.model.checkpoint import read_checkpoint
from tests.helpers import assert_user_error, invoke, make_lm_folder, sentences

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lmbench"), sentences(400), 330)


def _args(lm_dir, out, *extra):
    return ["bench", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}",
            "--epochs", "1", "--block-size", "16", "--eval-tokens", "300", "--lr", "0.003", "--layer-dropout", "0.3",
            "--audit-samples", "60", "--out", out, *extra]  # fmt: skip


@pytest.fixture(scope="module")
def benched(lm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("benchout")
    files = ["--json", root / "b.json", "--markdown", root / "b.md"]
    r = invoke(*_args(lm_dir, root / "runs", "--seeds", "2", "--objective", "kl,ce", *files))
    assert r.exit_code == 0, r.output
    return root, r.output, json.loads((root / "b.json").read_text())


def test_the_means_over_seeds_are_the_runs_own_figures(benched):
    _, output, doc = benched
    assert doc["task"] == "lm" and set(doc["objectives"]) == {"kl", "ce"} and len(doc["runs"]) == 4
    assert "layers and heads (kl)" in output and "audit (ce)" in output
    for objective, entry in doc["objectives"].items():
        runs = [r for r in doc["runs"] if r["objective"] == objective]
        assert entry["runs"] == 2 and entry["seeds"] == [1337, 1338]
        ckpts = [read_checkpoint(r["checkpoint"]) for r in runs]
        assert all(c["dataset"]["objective"] == objective for c in ckpts)
        metrics = [c["metrics"] for c in ckpts]
        for i, layer in enumerate(entry["layers"]):
            for k in ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce", "alpha"):
                values = [m["layers"][i][k] for m in metrics]
                assert layer[k]["mean"] == pytest.approx(statistics.fmean(values), abs=1e-9)
                assert layer[k]["ci_low"] <= layer[k]["mean"] <= layer[k]["ci_high"]
            # the logit lens is not trained: every seed reads the same held-out positions through the same model
            assert layer["logit_kl"]["std"] == pytest.approx(0, abs=1e-9)
        ce = [m["heads"]["laya"]["ce"] for m in metrics]
        assert entry["heads"]["laya"]["ce"]["mean"] == pytest.approx(statistics.fmean(ce))
        assert len(set(ce)) == 2  # the seeds trained different heads


def test_the_audit_means_are_laya_audit_of_each_run(benched, tmp_path):
    _, _, doc = benched
    entry = doc["objectives"]["kl"]
    faith = {"laya": [], "gradxact": []}
    for run in [r for r in doc["runs"] if r["objective"] == "kl"]:
        out = tmp_path / "a.json"
        r = invoke(
            "audit",
            run["checkpoint"],
            "--samples",
            "60",
            "--compare",
            "gradxact",
            "--json",
            out,
            "--quiet",
            "--overwrite",
        )
        assert r.exit_code == 0, r.output
        audit = json.loads(out.read_text())
        # the bench asks what laya audit asks by default: the checkpoint's question (network scope, bypass)
        assert audit["settings"]["scope"] == "network"
        for m in faith:
            faith[m].append(audit["network"]["methods"][m]["faithfulness"])
    for m, values in faith.items():
        assert entry["audit"][m]["faithfulness"]["mean"] == pytest.approx(statistics.fmean(values), abs=1e-9)
    assert entry["audit_samples"] == 60


def test_a_second_bench_reuses_the_finished_runs(benched, lm_dir):
    root, _, doc = benched
    out = root / "again.json"
    r = invoke(*_args(lm_dir, root / "runs", "--seeds", "2", "--objective", "kl,ce", "--json", out, "--quiet"))
    assert r.exit_code == 0, r.output
    again = json.loads(out.read_text())
    assert not any(run["trained"] for run in again["runs"])
    assert again["objectives"] == doc["objectives"]
    other = root / "other.json"  # the same runs asked with another learning rate: refused, nothing retrained
    r = invoke(*_args(lm_dir, root / "runs", "--seeds", "2", "--lr", "0.01", "--json", other, "--quiet"))
    assert_user_error(r, "trained with other options")
    assert not other.exists()
    md = (root / "b.md").read_text()
    assert md.startswith("# laya bench --task lm") and "## --objective ce" in md and " ± " in md


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--dataset", "digits"], "text:PATH"),
        (["--heads", "laya,last"], "--heads"),
        (["--objective", "mse"], "--objective"),
        (["--seeds", "0"], "--seeds"),
        (["--task", "classify"], "only apply to language models"),
        (["--finetune"], "--finetune"),
    ],
)
def test_bad_lm_bench_input_is_one_line_and_writes_nothing(lm_dir, tmp_path, extra, fragment):
    json_out = tmp_path / "b.json"
    assert_user_error(invoke(*_args(lm_dir, tmp_path / "runs", "--json", json_out), *extra), fragment)
    assert not json_out.exists() and not (tmp_path / "runs").exists()
