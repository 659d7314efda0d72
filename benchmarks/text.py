"""Text end to end: an encoder and a decoder built from small configs, trained on WordNet supersenses.

    python -m benchmarks.text [--out DIR] [--epochs N] [--max-length L] [--only bert|llama]

For each model (a BERT-style encoder and a Llama-style decoder, random initialisation, saved with
``save_pretrained``; no hub access): ``laya train --finetune`` on ``wordnet-supersenses`` (the tokenizer is
learnt on the training split), ``laya audit --scope both --compare ig,gradxact``, ``laya depth``. Every
command is printed before it runs and its output kept under ``--out``; the closing summary is what
docs/text.md reports. Needs Debian's ``wordnet-base`` (``apt-get install wordnet-base``) and the ``hf`` extra.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256, vocab_size=8000)


def make_models(root: Path) -> dict[str, Path]:
    """The two small models, saved with save_pretrained (seeded: the same weights on every run)."""
    import torch
    import transformers

    configs = {
        "bert": transformers.BertConfig(max_position_embeddings=64, **SMALL),
        "llama": transformers.LlamaConfig(max_position_embeddings=64, num_key_value_heads=2, **SMALL),
    }
    out = {}
    for name, config in configs.items():
        torch.manual_seed(0)
        transformers.AutoModel.from_config(config).save_pretrained(root / name)
        out[name] = root / name
    return out


def laya(*args) -> str:
    cmd = [sys.executable, "-m", "laya_cli", *map(str, args)]
    print("$ laya " + " ".join(shlex.quote(str(a)) for a in args), flush=True)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode not in (0, 1):
        print(r.stderr, file=sys.stderr)
        raise SystemExit(f"laya {args[0]} failed (exit {r.returncode})")
    print(f"  ({time.perf_counter() - t:.0f} s)\n", flush=True)
    return r.stdout


def run(name: str, model: Path, out: Path, epochs: int, max_length: int) -> dict:
    ckpt = out / f"{name}.pt"
    laya(
        "train",
        "--backbone",
        f"hf:{model}",
        "--dataset",
        "wordnet-supersenses",
        "--finetune",
        "--max-length",
        max_length,
        "--epochs",
        epochs,
        "--batch-size",
        128,
        "--out",
        ckpt,
        "-q",
    )
    laya(
        "audit",
        ckpt,
        "--scope",
        "both",
        "--compare",
        "ig,gradxact",
        "--samples",
        1000,
        "--json",
        out / f"{name}-audit.json",
        "--markdown",
        out / f"{name}-audit.md",
    )
    laya("depth", ckpt, "--samples", 500, "--json", out / f"{name}-depth.json", "--markdown", out / f"{name}-depth.md")
    info = json.loads(laya("info", ckpt, "--json"))
    return {"name": name, "metrics": info["metrics"], "layers": info["layers"], "pool": info["backbone"]["pool"]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("text-results"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--only", default="bert,llama")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    models = make_models(args.out / "models")
    rows = [run(n, models[n], args.out, args.epochs, args.max_length) for n in args.only.split(",")]
    print("model  pool  layers  test accuracy  macro-F1  epochs")
    for r in rows:
        m = r["metrics"]
        print(
            f"{r['name']:6s} {r['pool']:5s} {len(r['layers']):6d}  {m['test_accuracy']:.4f}         "
            f"{m['test_macro_f1']:.4f}    {m['epochs_run']}"
        )


if __name__ == "__main__":
    main()
