"""The wheel is the product: built, installed into a fresh virtual environment outside the checkout,
and run from there (train, audit and export need only what the wheel ships)."""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=1200, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_installed_wheel_runs_outside_the_checkout(tmp_path):
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist", ROOT]
    )
    wheel = next((tmp_path / "dist").glob("laya_audit-*.whl"))
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    # The heavy dependencies (torch, timm, captum…) come from this environment's site-packages as a plain
    # path: its .pth files (the editable install of the checkout among them) are not processed there.
    new_site = next((venv / "lib").glob("python*/site-packages"))
    (new_site / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    run([venv / "bin" / "pip", "install", "--no-deps", "-q", wheel])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([venv / "bin" / "python", "-c", "import laya_cli; print(laya_cli.__file__)"], cwd=elsewhere)
    assert where.stdout.strip().startswith(str(new_site)), where.stdout
    assert (new_site / "laya_cli" / "py.typed").is_file()  # PEP 561: the public API's annotations are for users
    laya = venv / "bin" / "laya"
    run([laya, "train", "--dataset", "digits", "--epochs", "2", "--out", "m.pt"], cwd=elsewhere)
    run([laya, "audit", "m.pt", "--samples", "64", "--json", "audit.json", "-q"], cwd=elsewhere)
    run([laya, "export", "m.pt", "--out", "export", "--samples", "64", "--no-plots"], cwd=elsewhere)
    doc = json.loads((elsewhere / "audit.json").read_text())
    assert doc["n_samples"] == 64 and "laya" in doc["methods"]
    assert (elsewhere / "export" / "report.html").is_file()
    shipped = {p.relative_to(new_site / "laya_cli").parts[0] for p in (new_site / "laya_cli").rglob("*.py")}
    assert not shipped & {"speed", "testing.py", "synthetic.py", "_moved.py"}, shipped  # they live in the checkout
