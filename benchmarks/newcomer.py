"""``python -m benchmarks.newcomer``: a newcomer's first hour, scripted and timed (issue 63).

The wheel is built and installed into a fresh virtual environment outside the checkout (its heavy dependencies,
torch, timm, transformers…, from this environment's site-packages, as the wheel test does: nothing downloads),
and every step runs offline (``LAYA_OFFLINE=1``, ``HF_HUB_OFFLINE=1``) in a folder of the newcomer's own:

1. ``laya --version`` and ``laya train --help`` (the docs folder the wheel installed; the help's panels);
2. their own ImageFolder with a timm model: pretrained weights cannot be had offline, and the error says what to do;
   they follow it with a file of their own weights (``--weights``) and train a frozen head, audit and export it;
3. their own Hugging Face folder fine-tuned on their csv (``--finetune``): the checkpoint starts from the folder's
   weights (checked: the word embeddings after one epoch at lr 1e-12 equal the folder's);
4. the CI gate: an unqualified ``--fail-under`` checks the model's own α only.

Each step prints its wall time and what it checked; a step that does not do what it should ends the run (exit 1).
``--keep DIR`` keeps the folder. Takes a few minutes (the wheel build and the venv dominate)."""

from __future__ import annotations

import argparse
import json
import os
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Newcomer:
    """A fresh environment with the wheel installed, and the steps run in it, each timed."""

    def __init__(self, home: Path):
        self.home, self.rows = home, []
        self.env = {**os.environ, "LAYA_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "100"}
        self.env.pop("PYTHONPATH", None)

    def run(self, what: str, *cmd, ok=(0,), cwd=None) -> subprocess.CompletedProcess:
        start = time.perf_counter()
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=self.env,
                              cwd=cwd or self.home / "work", timeout=1800)  # fmt: skip
        seconds = time.perf_counter() - start
        if proc.returncode not in ok:
            raise SystemExit(f"{what}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        self.rows.append((what, seconds, proc.returncode))
        print(f"{seconds:7.1f} s  {what} (exit {proc.returncode})", flush=True)
        return proc

    def install(self) -> Path:
        """The wheel built and installed into a new venv; the path of its ``laya``."""
        dist, venv = self.home / "dist", self.home / "venv"
        self.run("build the wheel", sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                 "-w", dist, ROOT, cwd=self.home)  # fmt: skip
        self.run("create a venv", sys.executable, "-m", "venv", venv, cwd=self.home)
        new_site = next((venv / "lib").glob("python*/site-packages"))
        (new_site / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        wheel = next(dist.glob("laya_audit-*.whl"))
        self.run("pip install the wheel", venv / "bin" / "pip", "install", "--no-deps", "-q", wheel, cwd=self.home)
        return venv / "bin" / "laya"


def own_files(work: Path) -> dict:
    """What a newcomer brings: an image folder, a state dict of a timm ResNet-18, a transformers folder and a csv."""
    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks.synthetic import make_image_folder, tiny_bert

    make_image_folder(work / "shapes", per_class=20, size=48)
    import timm

    torch.manual_seed(0)
    torch.save(timm.create_model("resnet18", num_classes=0).state_dict(), work / "my_resnet18.pth")
    tiny_bert(work / "text")
    return {"folder": work / "shapes", "weights": work / "my_resnet18.pth", "bert": work / "text" / "bert",
            "csv": work / "text" / "data"}  # fmt: skip


def walk(n: Newcomer, laya: Path, files: dict) -> None:
    """The newcomer's steps, each checked."""
    version = n.run("laya --version", laya, "--version").stdout
    assert "docs " in version and "share/doc/laya-audit" in version, version
    helps = n.run("laya train --help", laya, "train", "--help").stdout
    assert all(f"\n{p}:\n" in helps for p in ("Main", "Data", "Backbone", "Head", "Training")), helps[:500]
    timm_run = ["train", "--backbone", "timm:resnet18", "--dataset", f"folder:{files['folder']}", "--epochs", "3"]
    refused = n.run("timm:resnet18, offline, no weights", laya, *timm_run, "--out", "x.pt", ok=(2,)).stderr
    assert "--weights FILE" in refused and "--no-pretrained --finetune" in refused, refused
    trained = n.run("... with --weights FILE", laya, *timm_run, "--weights", files["weights"], "--out", "shapes.pt")
    assert "starts from the weights in" in trained.stderr, trained.stderr
    n.run("laya audit shapes.pt", laya, "audit", "shapes.pt", "--samples", "30", "--json", "audit.json")
    n.run("laya export shapes.pt", laya, "export", "shapes.pt", "--out", "report", "--samples", "30")
    bert = ["train", "--backbone", f"hf:{files['bert']}", "--dataset", f"csv:{files['csv']}", "--max-length", "16"]
    tuned = n.run("hf folder --finetune", laya, *bert, "--finetune", "--epochs", "1", "--lr", "1e-12", "--out", "ft.pt")
    assert f"starts from hf pretrained {files['bert'].resolve()}" in tuned.stderr, tuned.stderr
    check_start(n.home / "work" / "ft.pt", files["bert"])
    gate = n.run("the CI gate", laya, "audit", "shapes.pt", "--samples", "30", "--compare", "ig,gradxact",
                 "--fail-under", "faithfulness=-1", "--json", "gate.json", "-q")  # fmt: skip
    doc = json.loads((n.home / "work" / "gate.json").read_text())
    assert doc["fail_under"]["thresholds"] == ["laya:faithfulness=-1"] and doc["verdict"]["checks"] == 1, doc
    assert "1 of 1 gate checks passed" in gate.stdout, gate.stdout


def check_start(ckpt: Path, folder: Path) -> None:
    """The fine-tuned checkpoint's word embeddings are the folder's (one epoch at lr 1e-12 moves nothing)."""
    import torch
    from transformers import AutoModel

    given = next(v for k, v in AutoModel.from_pretrained(folder).state_dict().items() if "word_embeddings" in k)
    stored = torch.load(ckpt, weights_only=True)["backbone"]["weights"]
    got = next(v for k, v in stored.items() if "word_embeddings" in k)
    assert (got - given).abs().max() < 1e-6, float((got - given).abs().max())
    print("          the fine-tuned checkpoint starts from the folder's weights (max |Δ| < 1e-6)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="Work in this folder and keep it.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = args.keep or Path(tmp)
        (home / "work").mkdir(parents=True, exist_ok=True)
        n = Newcomer(home)
        start = time.perf_counter()
        laya = n.install()
        files = own_files(home / "work")
        walk(n, laya, files)
        print(f"{time.perf_counter() - start:7.1f} s  in all, {len(n.rows)} steps, every check passed")


if __name__ == "__main__":
    main()
