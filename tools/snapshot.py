"""``python tools/snapshot.py OUT``: the outputs a behaviour-preserving change must leave identical.

Trains the digits MLP and a tiny BERT (built from a config, a made-up 3-topic csv: no download), audits both with
``--scope both --compare all --metrics all --json``, runs a two-seed ``laya bench`` with its ``--json``, trains and
audits a tiny GPT-2 with ``--task lm`` (``--scope both``), and ``laya depth`` on the digits model; then
writes ``OUT/checkpoints.json`` (every tensor's SHA-256 and every plain value of the three checkpoints). Run it before
and after a refactor into two folders and compare them with ``tools/json_diff.py`` (timings and paths ignored)::

    python tools/snapshot.py /tmp/before      # on main
    python tools/snapshot.py /tmp/after       # on the change
    for f in digits-audit bert-audit lm-audit digits-depth bench checkpoints; do
      python tools/json_diff.py /tmp/before/$f.json /tmp/after/$f.json --ignore seconds,time,/out,model,options,path
    done
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path


def laya(*args) -> None:
    env = {**os.environ, "LAYA_OFFLINE": "1", "LAYA_CACHE_DIR": os.environ.get("LAYA_CACHE_DIR", "")}
    if not env["LAYA_CACHE_DIR"]:
        env.pop("LAYA_CACHE_DIR")
    r = subprocess.run([sys.executable, "-m", "laya_cli", *map(str, args)], env=env, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"laya {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")


def tiny_gpt2(root: Path) -> Path:
    """A 4-layer GPT-2 and its corpus, as the language-model tests make them (``benchmarks.synthetic``)."""
    from benchmarks.synthetic import make_lm_folder, sentences

    return make_lm_folder(root, sentences(400), 330)


def describe(ckpt_path: Path) -> dict:
    """Every tensor of a checkpoint as its SHA-256, every plain value as itself."""
    import torch

    def walk(v):
        if isinstance(v, torch.Tensor):
            return hashlib.sha256(v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()
        if isinstance(v, dict):
            return {str(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)

    return walk(torch.load(ckpt_path, map_location="cpu", weights_only=True))


def main(out: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's benchmarks/ (synthetic inputs)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    audit = ["--scope", "both", "--compare", "all", "--metrics", "all", "-q"]
    laya("train", "--dataset", "digits", "--epochs", "3", "--out", out_dir / "digits.pt", "-q")
    laya("audit", out_dir / "digits.pt", *audit, "--samples", "120", "--json", out_dir / "digits-audit.json")
    from benchmarks.synthetic import tiny_bert

    root = tiny_bert(out_dir / "text")
    bert = ["--backbone", f"hf:{root / 'bert'}", "--dataset", f"csv:{root / 'data'}", "--max-length", "16"]
    laya("train", *bert, "--epochs", "3", "--pool", "mean", "--out", out_dir / "bert.pt", "-q")
    laya("audit", out_dir / "bert.pt", *audit, "--json", out_dir / "bert-audit.json")
    bench = ["--dataset", "digits", "--seeds", "2", "--epochs", "2", "--audit-samples", "60", "-q"]
    laya("bench", *bench, "--out", out_dir / "bench", "--json", out_dir / "bench.json")
    gpt = tiny_gpt2(out_dir / "gpt2")
    lm = ["--task", "lm", "--backbone", f"hf:{gpt / 'model'}", "--dataset", f"text:{gpt / 'corpus'}"]
    lm_train = ["--epochs", "2", "--batch-size", "8", "--block-size", "16", "--eval-tokens", "300", "--lr", "3e-3"]
    laya("train", *lm, *lm_train, "--out", out_dir / "lm.pt", "-q")
    lm_audit = ["--scope", "both", "--compare", "all", "--samples", "200", "-q"]
    laya("audit", out_dir / "lm.pt", *lm_audit, "--json", out_dir / "lm-audit.json")
    laya("depth", out_dir / "digits.pt", "--time-repeats", "0", "--json", out_dir / "digits-depth.json")
    checkpoints = {name: describe(out_dir / f"{name}.pt") for name in ("digits", "bert", "lm")}
    (out_dir / "checkpoints.json").write_text(json.dumps(checkpoints, indent=1, sort_keys=True, default=str))
    print(f"snapshot in {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n")[0])
    main(sys.argv[1])
