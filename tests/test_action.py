"""The composite GitHub Action (action.yml): its run step executed locally, the way the runner would run it
(inputs as env, $GITHUB_ACTION_PATH, $GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY), with no network; and the
CI examples of docs/ci.md parse and use only inputs the action declares."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads action.yml (pip install 'laya-audit[test]')")

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def evaluate(text: str, inputs: dict) -> str:
    """GitHub's ${{ inputs.NAME }} substitution; any other expression in a run step fails the test."""

    def sub(m):
        expr = m.group(1)
        assert expr.startswith("inputs."), f"unexpected expression in action.yml: {expr}"
        return str(inputs[expr[len("inputs.") :]])

    return EXPR.sub(sub, text)


def run_step(tmp_path: Path, **given) -> tuple[subprocess.CompletedProcess, dict, str]:
    """Run the action's steps with ``given`` inputs (defaults from action.yml); returns (process, outputs, summary)."""
    spec = action()
    inputs = {k: v.get("default", "") for k, v in spec["inputs"].items()}
    inputs.update({k.replace("_", "-"): v for k, v in given.items()})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "laya"  # `laya` on PATH: this interpreter, this checkout (PYTHONPATH is inherited)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m laya_cli "$@"\n')
    shim.chmod(0o755)
    out, summary = tmp_path / "github_output", tmp_path / "step_summary.md"
    out.write_text("")
    summary.write_text("")
    procs = []
    for step in spec["runs"]["steps"]:
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "LAYA_OFFLINE": "1",
            "GITHUB_ACTION_PATH": str(ROOT),
            "GITHUB_OUTPUT": str(out),
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        env.update({k: evaluate(str(v), inputs) for k, v in step.get("env", {}).items()})
        procs.append(
            subprocess.run(
                ["bash", "-c", evaluate(step["run"], inputs)],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        )
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if line)
    return procs[-1], outputs, summary.read_text()


def test_the_action_declares_what_the_issue_asks_and_wires_every_input():
    spec = action()
    assert spec["runs"]["using"] == "composite"
    assert {"model", "compare", "fail-under", "max-drop", "baseline", "gate-on", "inconclusive-exit"} <= set(
        spec["inputs"]
    )
    assert "inconclusive" in spec["outputs"]["verdict"]["description"]
    assert {"json", "verdict"} <= set(spec["outputs"])
    (step,) = spec["runs"]["steps"]
    wired = {EXPR.search(v).group(1)[len("inputs.") :] for v in step["env"].values()}
    assert wired == set(spec["inputs"])  # every input reaches the script, and only through env (no injection)
    assert "inputs." not in step["run"]
    script = (ROOT / "action" / "audit.sh").read_text()
    for name, out in spec["outputs"].items():
        assert out["value"] == f"${{{{ steps.{step['id']}.outputs.{name} }}}}"
        assert f"output {name} " in script, name


def test_the_run_step_passes_fails_and_errors_like_laya(digits_ckpt, tmp_path):
    common = {"model": str(digits_ckpt), "samples": "60", "args": "--steps 4", "install": ""}
    proc, outputs, summary = run_step(tmp_path, fail_under="faithfulness=-1", **common)
    assert proc.returncode == 0, proc.stderr
    assert outputs == {"json": "laya-audit.json", "junit": "laya-junit.xml", "verdict": "pass", "exit-code": "0"}
    base = json.loads((tmp_path / "laya-audit.json").read_text())
    assert base["n_samples"] == 60 and base["settings"]["steps"] == 4 and base["verdict"]["passed"] is True
    assert "<testsuites" in (tmp_path / "laya-junit.xml").read_text()
    assert summary.startswith("### laya audit") and "fail-under: all thresholds met" in summary

    base["methods"]["laya"]["faithfulness"] += 0.1  # main was better: the same model now regressed
    (tmp_path / "main-audit.json").write_text(json.dumps(base))
    proc, outputs, summary = run_step(
        tmp_path, baseline="main-audit.json", max_drop="faithfulness=0.02", json="pr-audit.json", **common
    )
    assert proc.returncode == 1
    assert outputs["verdict"] == "fail" and outputs["exit-code"] == "1" and outputs["json"] == "pr-audit.json"
    assert "max-drop: laya: faithfulness dropped 0.1000" in proc.stderr
    assert "| faithfulness | baseline | Δ |" in summary and "**max-drop: dropped too far**" in summary

    proc, outputs, _ = run_step(tmp_path, **{**common, "model": ""})
    assert proc.returncode == 2 and outputs["verdict"] == "error" and "'model' input is required" in proc.stderr
    proc, outputs, _ = run_step(tmp_path, max_drop="faithfulness=1", **common)  # --max-drop without --baseline
    assert proc.returncode == 2 and outputs["verdict"] == "error"
    assert proc.stderr.strip().startswith("error: --max-drop needs --baseline")


def test_an_inconclusive_bound_gate_reads_inconclusive_whatever_its_exit_code(digits_ckpt, tmp_path):
    """The verdict output is the JSON's: inconclusive with exit 1 (the default) and with inconclusive-exit 0."""
    common = {"model": str(digits_ckpt), "samples": "60", "args": "--steps 4 --bootstrap 200", "install": ""}
    proc, outputs, _ = run_step(tmp_path, fail_under="faithfulness=-1", **common)
    acc = json.loads((tmp_path / "laya-audit.json").read_text())["accuracy"]
    gate = {"fail_under": f"accuracy={acc:.6f}", "gate_on": "bound"}  # a bar at the estimate: straddled
    proc, outputs, _ = run_step(tmp_path, **gate, **common)
    assert proc.returncode == 1, proc.stderr
    assert outputs["verdict"] == "inconclusive" and outputs["exit-code"] == "1"
    proc, outputs, summary = run_step(tmp_path, **gate, inconclusive_exit="0", **common)
    assert proc.returncode == 0, proc.stderr
    assert outputs["verdict"] == "inconclusive" and outputs["exit-code"] == "0"
    assert json.loads((tmp_path / "laya-audit.json").read_text())["verdict"]["verdict"] == "inconclusive"
    proc, outputs, _ = run_step(tmp_path, gate_on="maybe", **common)
    assert proc.returncode == 2 and outputs["verdict"] == "error"


def yaml_blocks(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    return [yaml.safe_load(b) for b in re.findall(r"```ya?ml\n(.*?)```", text, re.S)]


def test_the_ci_examples_parse_and_use_the_actions_inputs():
    blocks = yaml_blocks(ROOT / "docs" / "ci.md")
    assert len(blocks) >= 3
    inputs, outputs = set(action()["inputs"]), set(action()["outputs"])
    used, gated, read = 0, False, set()
    for doc in blocks:
        for job in (doc.get("jobs") or {}).values():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).split("@")[0].endswith("/laya"):
                    assert set(step.get("with", {})) <= inputs, step["with"]
                    used += 1
                    gated = gated or step["with"].get("gate-on") == "bound"
            text = json.dumps(job)  # every output of the laya step that a later step reads is declared
            ids = {st.get("id") for st in job.get("steps", []) if str(st.get("uses", "")).endswith("/laya@main")}
            for step_id, name in re.findall(r"steps\.([\w-]+)\.outputs\.([\w-]+)", text):
                if step_id in ids:
                    assert name in outputs, name
                    read.add(name)
    assert used >= 1 and gated and "verdict" in read
    gitlab = [b for b in blocks if any(isinstance(v, dict) and "script" in v for v in b.values())]
    assert gitlab and any(
        "junit" in str(v.get("artifacts", {})) for b in gitlab for v in b.values() if isinstance(v, dict)
    )
