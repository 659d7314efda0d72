"""`laya bench`: a tiny head comparison on digits (tables, JSON, Markdown, reuse, bad input) and the speed summary."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_user_error, invoke

from laya_cli.auditing.question import checkpoint_question
from laya_cli.model.checkpoint import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
HEADS = ["laya", "last"]
SEEDS = [1337, 1338]
METHODS = ["laya", "ig", "gradxact", "contrib", "global", "random"]
TINY = {
    "--dataset": "digits",
    "--heads": ",".join(HEADS),
    "--seeds": 2,
    "--epochs": 1,
    "--audit-samples": 60,
    "--steps": 4,
    "--d-star": 16,
    "--score-hidden": 16,
}


def bench(out: Path, *extra, **changes):
    """``laya bench`` with the tiny options, some changed (``audit_samples=30`` -> ``--audit-samples 30``)."""
    opts = {**TINY, **{"--" + k.replace("_", "-"): v for k, v in changes.items()}}
    args = [str(x) for kv in opts.items() for x in kv]
    return invoke(*["bench", *args, "--out", str(out), *map(str, extra)])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One tiny bench (2 heads × 2 seeds × 1 epoch on digits) with its JSON and Markdown."""
    root = tmp_path_factory.mktemp("bench")
    js, md = root / "bench.json", root / "bench.md"
    result = bench(root / "out", "--json", js, "--markdown", md, "-q")
    assert result.exit_code == 0, result.output
    return {
        "root": root,
        "out": root / "out",
        "result": result,
        "json": json.loads(js.read_text()),
        "markdown": md.read_text(),
    }


def _is_stat(s, n, with_std=True):
    assert set(s) == {"mean", "std", "n", "values", "ci_low", "ci_high", "ci_level"}, s
    assert s["n"] == n and len(s["values"]) == n
    assert isinstance(s["mean"], float) and math.isfinite(s["mean"])
    if with_std:
        assert isinstance(s["std"], float) and s["std"] >= 0


def test_tiny_bench_json_is_complete(tiny):
    doc = tiny["json"]
    assert doc["format"] == "laya-bench"
    b = doc["bench"]
    assert (b["dataset"], b["backbone"], b["heads"], b["seeds"], b["base_seed"]) == (
        "digits",
        "mlp",
        HEADS,
        SEEDS,
        1337,
    )
    assert b["audit"]["methods"] == METHODS and b["audit"]["samples"] == 60 and b["train"]["epochs"] == 1
    assert b["head_config"] == {"d_star": 16, "tau": 1.5, "psi": "identity", "score_hidden": 16}
    assert list(doc["heads"]) == HEADS
    for head, e in doc["heads"].items():
        assert e["runs"] == 2 and e["seeds"] == SEEDS and e["audit_samples"] == 60
        # each run asked its checkpoint's question, as laya audit of it does (here: the built-in MLP's both scopes)
        for seed in SEEDS:
            ckpt = read_checkpoint(tiny["out"] / "digits-mlp" / f"{head}-seed{seed}.pt")
            assert e["audit_scope"] == checkpoint_question(ckpt).scope
        for k in ("test_accuracy", "test_macro_f1", "val_accuracy"):
            _is_stat(e[k], 2)
            assert all(0 <= v <= 1 for v in e[k]["values"])
        assert e["epochs_run"]["values"] == [1, 1]
        assert list(e["methods"]) == METHODS
        for m, s in e["methods"].items():
            assert set(s) >= {
                "available",
                "note",
                "faithfulness",
                "deletion@1",
                "deletion@1_normalised",
                "deletion@1_oracle",
                "deletion@1_random",
                "undefined",
                "defined",
            }
            defined_here = head == "laya" or m not in ("laya", "contrib", "global")
            assert s["available"] is defined_here, (head, m)
            if defined_here:
                _is_stat(s["deletion@1"], 2)
                assert s["note"] is None
            else:  # undefined for the head: reported, never a crash
                assert s["faithfulness"]["mean"] is None and s["note"] and "undefined" in s["note"]
            _is_stat(s["deletion@1_oracle"], 2)  # oracle/random depend only on Δ: always there
    assert doc["heads"]["laya"]["methods"]["laya"]["faithfulness"]["mean"] is not None
    assert len(doc["runs"]) == 4
    assert {(r["head"], r["seed"]) for r in doc["runs"]} == {(h, s) for h in HEADS for s in SEEDS}
    for r in doc["runs"]:
        assert Path(r["checkpoint"]).is_file() and Path(r["record"]).is_file() and r["reused"] is False
        assert r["train_seconds"] > 0 and r["audit_seconds"] > 0
    assert doc["reused"] == 0 and doc["wall_seconds"] > 0 and doc["machine"]["cpu_count"] >= 1
    # strict JSON: no NaN anywhere
    json.loads(json.dumps(doc), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_tiny_bench_tables_and_markdown(tiny):
    out = tiny["result"].stdout
    for title in ("laya bench: accuracy", "faithfulness", "Deletion@1"):
        assert title in out
    for head in HEADS:
        assert head in out and f"{head} head" in out
    for m in METHODS + ["oracle", "random exp."]:
        assert m in out
    assert "±" in out and "n/a" in out  # mean ± std; laya/contrib/global undefined on the last head
    assert "digits · mlp · 2 seeds (seeds 1337–1338)" in " ".join(out.split())
    md = tiny["markdown"]
    assert md.startswith("### laya bench: digits, mlp")
    assert md.count("| head |") == 1 and md.count("| method | laya head | last head |") == 2
    assert "#### Faithfulness" in md and "#### Deletion@1" in md and "**" in md
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == len(HEADS) + 2 * len(METHODS)
    assert all(row.count("|") == rows[0].count("|") for row in rows[: len(HEADS)])


def test_run_files_are_laid_out_per_run(tiny):
    folder = tiny["out"] / "digits-mlp"
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(f"{h}-seed{s}{x}" for h in HEADS for s in SEEDS for x in (".pt", ".json"))
    rec = json.loads((folder / "laya-seed1337.json").read_text())
    assert rec["format"] == "laya-bench-run" and rec["audit"]["n_samples"] == 60
    assert rec["train_options"]["train"]["seed"] == 1337 and rec["train_options"]["data"]["seed"] == 1337
    from laya_cli.model.checkpoint import read_checkpoint

    ckpt = read_checkpoint(folder / "last-seed1338.pt")
    assert ckpt["head"]["kind"] == "last" and ckpt["train_config"]["seed"] == 1338 and ckpt["dataset"]["seed"] == 1338


def test_second_invocation_reuses_every_run(tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    folder = out / "digits-mlp"
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    js = tmp_path / "again.json"
    result = bench(out, "--json", js)
    assert result.exit_code == 0, result.output
    assert "reusing 4 finished runs" in result.stderr
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps  # nothing rewritten
    doc = json.loads(js.read_text())
    assert doc["reused"] == 4 and all(r["reused"] for r in doc["runs"])
    assert "4 runs: 0 trained, 0 re-audited (checkpoint reused), 4 reused" in " ".join(result.stdout.split())
    # the same numbers as the first time, read back from the records
    assert doc["heads"] == tiny["json"]["heads"]


def test_new_audit_options_reaudit_without_retraining(tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    ckpts = {p.name: p.stat().st_mtime_ns for p in (out / "digits-mlp").glob("*.pt")}
    js = tmp_path / "re.json"
    result = bench(out, "--json", js, audit_samples=30)
    assert result.exit_code == 0, result.output
    doc = json.loads(js.read_text())
    assert doc["reaudited"] == 4 and doc["reused"] == 0
    # the summary line counts them as re-audited, not as "0 reused"
    assert "4 runs: 0 trained, 4 re-audited (checkpoint reused), 0 reused" in " ".join(result.stdout.split())
    assert doc["heads"]["laya"]["audit_samples"] == 30
    assert {p.name: p.stat().st_mtime_ns for p in (out / "digits-mlp").glob("*.pt")} == ckpts


def test_each_run_is_audited_on_the_question_laya_audit_asks_of_its_checkpoint(tmp_path):
    """A head aligned with the network's effects is audited at network scope (its checkpoint's question), as the
    default ``laya audit`` of that checkpoint is, to the same numbers; the scope asked is in the JSON; a record audited
    on another question (the head's, as before) is re-audited, not reused."""
    out, js = tmp_path / "out", tmp_path / "b.json"
    args = ("--json", js, "-q")
    r = bench(out, *args, heads="laya-aligned", seeds=1, compare="gradxact", align_target="network")
    assert r.exit_code == 0, r.output
    doc = json.loads(js.read_text())
    assert doc["heads"]["laya-aligned"]["audit_scope"] == "network"
    assert [r["audit_scope"] for r in doc["runs"]] == ["network"]
    ckpt = out / "digits-mlp" / "laya-aligned-seed1337.pt"
    audited = tmp_path / "a.json"
    cli = invoke("audit", ckpt, "--samples", 60, "--steps", 4, "--compare", "gradxact", "--json", audited)
    assert cli.exit_code == 0, cli.output
    asked = json.loads(audited.read_text())
    assert asked["settings"]["scope"] == "network" and asked["methods"] == {}
    for m in ("laya", "gradxact"):
        mean = doc["heads"]["laya-aligned"]["methods"][m]["faithfulness"]["mean"]
        assert mean == pytest.approx(asked["network"]["methods"][m]["faithfulness"], abs=1e-6), m
    record = out / "digits-mlp" / "laya-aligned-seed1337.json"
    old = json.loads(record.read_text())
    old["audit_options"].pop("scope")  # as a record audited before the question was asked
    record.write_text(json.dumps(old))
    js2 = tmp_path / "again.json"
    r = bench(out, "--json", js2, "-q", heads="laya-aligned", seeds=1, compare="gradxact", align_target="network")
    assert r.exit_code == 0, r.output
    again = json.loads(js2.read_text())
    assert again["reaudited"] == 1 and again["reused"] == 0
    assert again["heads"]["laya-aligned"]["methods"] == doc["heads"]["laya-aligned"]["methods"]  # the same audit


def test_runs_made_with_other_training_options_are_not_silently_mixed(tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    assert_user_error(bench(out, "-q", lr=0.001), "trained with other options", "train.lr", "--redo")


def test_an_extra_seed_trains_only_the_new_runs(tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    js = tmp_path / "three.json"
    result = bench(out, "--json", js, "-q", seeds=3, heads="laya")
    assert result.exit_code == 0, result.output
    doc = json.loads(js.read_text())
    assert [r["reused"] for r in doc["runs"]] == [True, True, False]
    assert doc["heads"]["laya"]["seeds"] == [1337, 1338, 1339]


def test_an_interrupted_run_continues_from_its_last_epoch(tmp_path):
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.settings import HeadSettings
    from laya_cli.runtime.errors import TrainingInterrupted
    from laya_cli.training import bench as B
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    template = TrainJobSettings(
        data=DataSettings("digits"),
        head_config=HeadSettings(d_star=8, score_hidden=8),
        train=TrainingSettings(epochs=2),
    )
    req = B.BenchSettings(
        train=template, audit=AuditSettings(steps=2), heads=["laya"], seeds=1, audit_samples=20, out=str(tmp_path / "b")
    )
    first = req.train_request("laya", 1337)
    req.folder.mkdir(parents=True)

    def stop(record):
        raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        train(first, on_epoch=stop)  # killed after epoch 1: its state is beside the checkpoint path
    assert first.state_path.is_file() and not Path(first.out).exists()
    result = B.run_bench(req)
    rec = json.loads(req.run_path("laya", 1337, ".json").read_text())
    assert rec["resumed"] is True and rec["metrics"]["epochs_run"] == 2
    assert result.runs[0]["reused"] is False and not first.state_path.exists()


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--heads", "laya,lyaa"], ["unknown head 'lyaa'", "did you mean laya"]),
        (["--heads", ","], ["--heads is empty"]),
        (["--seeds", "0"], ["--seeds must be at least 1"]),
        (["--dataset", "fashion-mnst"], ["unknown dataset 'fashion-mnst'", "fashion-mnist"]),
        (["--audit-samples", "0"], ["--audit-samples must be at least 1"]),
        (["--compare", "ig,gradx"], ["unknown method 'gradx'"]),
        (["--epochs", "0"], ["--epochs must be at least 1"]),
        (["--ablation", "mask"], ["--ablation mask needs heads with layer weights"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragments):
    result = invoke(*["bench", "--out", str(tmp_path / "b"), *args])
    assert_user_error(result, *fragments)
    assert not (tmp_path / "b").exists()  # nothing created before the input is checked


def test_an_out_folder_that_cannot_be_made_is_a_user_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    assert_user_error(bench(tmp_path / "file", "-q"), "cannot create the bench folder")


def test_stats_mean_and_sample_std():
    from laya_cli.training.bench_stats import seed_stats

    s = seed_stats([0.8, 0.9, 1.0])
    assert s["mean"] == pytest.approx(0.9) and s["std"] == pytest.approx(0.1) and s["n"] == 3
    assert seed_stats([0.5])["std"] is None  # one seed: no spread to report
    assert seed_stats([None, float("nan")])["mean"] is None
    # the 95 % t-interval over seeds: mean ± t_{0.975, n−1} · std / √n, as scipy computes it
    from scipy import stats as sps

    lo, hi = sps.t.interval(0.95, 2, loc=0.9, scale=0.1 / math.sqrt(3))
    assert (s["ci_low"], s["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert seed_stats([0.5])["ci_low"] is None


def test_paired_differences_against_laya(tiny):
    """Each method − the laya method on the same run, each head − the laya head on the same seed, with intervals."""
    heads = tiny["json"]["heads"]
    laya = heads["laya"]
    ig = laya["methods"]["ig"]["vs_laya"]["faithfulness"]
    want = [
        a - b
        for a, b in zip(
            laya["methods"]["ig"]["faithfulness"]["values"], laya["methods"]["laya"]["faithfulness"]["values"]
        )
    ]
    assert ig["n"] == 2 and ig["mean"] == pytest.approx(sum(want) / 2) and ig["ci_low"] <= ig["mean"] <= ig["ci_high"]
    other = next(h for h in heads if h != "laya")
    acc = heads[other]["vs_laya_head"]["test_accuracy"]
    diffs = [a - b for a, b in zip(heads[other]["test_accuracy"]["values"], laya["test_accuracy"]["values"])]
    assert acc["mean"] == pytest.approx(sum(diffs) / 2)
    assert "Paired differences against `laya`" in tiny["markdown"]


# --------------------------------------------------------------------------- speed


FAKE_SUMMARY = {
    "quick": True,
    "device": "cpu",
    "torch_threads": 2,
    "cpu_count": 2,
    "wall_s": 12.0,
    "runs": {
        "baseline": {"ok": True, "result": {}, "peak_rss_mb": 800.0, "wall_s": 3.0},
        "train_cache": {
            "ok": True,
            "peak_rss_mb": 950.0,
            "wall_s": 4.0,
            "result": {
                "images": 12,
                "epochs": 2,
                "naive_s": 20.0,
                "cold_s": 4.0,
                "warm_s": 2.0,
                "naive/warm": 10.0,
                "cold/warm": 2.0,
            },
        },
        "audit_speed": {
            "ok": True,
            "peak_rss_mb": 990.0,
            "wall_s": 3.0,
            "result": {
                "device": "cpu, 2 torch threads",
                "images": 4,
                "plain_s": 1.0,
                "audit_s": 1.2,
                "naive_s": 60.0,
                "naive_blocks": [6],
                "naive_images": 1,
                "naive_measured_s": 1.25,
                "steps": 4,
                "audit_over_plain": 1.2,
                "audit_all_metrics_s": 3.0,
                "audit_all_metrics_over_plain": 3.0,
                "naive_over_audit": 50.0,
            },
        },
        "network_ig": {
            "ok": True,
            "peak_rss_mb": 990.0,
            "wall_s": 3.0,
            "result": {
                "route_images": 1,
                "steps": 32,
                "ig_tol": 0.001,
                "captum_ig_s": 9.0,
                "ours_ig_s": 3.0,
                "captum_over_ours": 3.0,
                "ours_mean_steps": 16.0,
                "ours_completeness": 0.99999,
                "captum_completeness": 0.99998,
            },
        },
        "plain": {
            "ok": True,
            "result": {"seconds": 1.0, "floor_mb": 880.0, "phase_peak_mb": 20.0},
            "peak_rss_mb": 900.0,
            "wall_s": 1.0,
        },
        "audit": {
            "ok": True,
            "result": {"seconds": 1.2, "floor_mb": 880.0, "phase_peak_mb": 30.0},
            "peak_rss_mb": 950.0,
            "wall_s": 1.0,
        },
        "audit_memory": {
            "ok": True,
            "peak_rss_mb": 700.0,
            "wall_s": 5.0,
            "result": {
                "dataset": "digits",
                "rows": {
                    "streamed": [
                        {"samples": 30, "peak_mb": 900.0, "floor_mb": 850.0},
                        {"samples": 300, "peak_mb": 950.0, "floor_mb": 850.0},
                    ]
                },
            },
        },
        "startup": {
            "ok": True,
            "peak_rss_mb": 700.0,
            "wall_s": 9.0,
            "result": {
                "torch_s": 2.0,
                "rounds": 1,
                "rows": [
                    {"command": "torch", "median_s": 2.0, "over_torch": 1.0, "cpu_over_torch": 1.0},
                    {"command": "laya --help", "median_s": 0.2, "over_torch": 0.1, "cpu_over_torch": 0.09},
                    {"command": "laya train --help", "median_s": 0.24, "over_torch": 0.12, "cpu_over_torch": 0.1},
                    {"command": "laya audit --help", "median_s": 0.26, "over_torch": 0.13, "cpu_over_torch": 0.1},
                    {
                        "command": "laya info model.pt",
                        "median_s": 2.5,
                        "over_torch": 1.25,
                        "minus_torch_s": 0.5,
                        "cpu_over_torch": 1.2,
                    },
                ],
            },
        },
    },
}


def test_speed_summary_puts_every_ratio_side_by_side():
    from rich.console import Console

    from benchmarks.harness import ratios
    from benchmarks.tables import speed_tables

    summary = dict(FAKE_SUMMARY)
    summary["ratios"] = ratios(summary)
    whats = [r["what"] for r in summary["ratios"]]
    assert whats == [
        "audit / plain inference",
        "audit --metrics all / plain",
        "naive Captum / ours",
        "network IG: Captum / ours",
        "train: no cache / warm cache",
        "train: cold cache / warm cache",
        "peak RSS: audit / plain",
        "audit memory, streamed: 300 / 30",
        "laya --help / import torch",
        "laya audit --help / import torch",
        "laya info / import torch",
    ]
    assert [r["ratio"] for r in summary["ratios"][-3:]] == [0.1, 0.13, 1.25]  # the slowest '<cmd> --help' shown
    rss = summary["ratios"][6]
    assert rss["ratio"] == pytest.approx(30 / 20)  # each phase alone, above its floor
    assert summary["ratios"][7]["ratio"] == pytest.approx(100 / 50)  # above each process's floor
    console = Console(width=120, record=True)
    console.print(speed_tables(summary))
    text = console.export_text()
    for fragment in (
        "1.20×",
        "50×",
        "10×",
        "1.50×",
        "2.00×",
        "≤ 1.1×",
        "3.00×",
        "≥ 2×, completeness no worse",
        "≥ 20×",
        "≥ 10×",
        "peak RSS",
        "baseline",
        "+150",
        "≤ 0.15×",
        "≤ torch + 1 s",
        "torch + 0.50 s",
    ):
        assert fragment in text


def test_the_speed_benchmarks_print_their_tables_and_json(monkeypatch, tmp_path, capsys):
    import benchmarks.harness as speed

    calls = []

    def fake_run_all(quick=False, device="cpu"):
        calls.append((quick, device))
        s = dict(FAKE_SUMMARY)
        s["ratios"] = speed.ratios(s)
        return s

    monkeypatch.setattr(speed, "run_all", fake_run_all)
    js = tmp_path / "speed.json"
    speed.main(["--quick", "--device", "cpu", "--json", str(js)])
    out = capsys.readouterr().out
    assert calls == [(True, "cpu")]
    assert "naive Captum / ours" in out and "peak memory" in out
    assert json.loads(js.read_text())["ratios"][0]["what"] == "audit / plain inference"


@pytest.mark.slow
def test_speed_entry_point_smoke_runs_every_benchmark(tmp_path):
    """``python -m benchmarks`` runs every benchmark (quick sizes)."""
    js = tmp_path / "speed.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--device", "cpu", "--json", str(js)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(js.read_text())
    assert set(doc["runs"]) == {"baseline", "train_cache", "audit_speed", "audit_memory", "startup"}  # QUICK_JOBS
    assert all(r["peak_rss_mb"] > 0 for r in doc["runs"].values())
    assert len(doc["ratios"]) >= 7 and all(r["ratio"] > 0 for r in doc["ratios"][:4])
    assert [r["what"] for r in doc["ratios"][-3:]] == [
        "laya --help / import torch",
        "laya train --help / import torch",
        "laya info / import torch",
    ]
    assert "laya speed benchmarks" in proc.stdout
