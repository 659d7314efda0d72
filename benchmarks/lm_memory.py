"""Peak memory of ``laya audit`` on a language model with a 50,257-token vocabulary (GPT-2's), with and without
``--max-memory``, each in a fresh process.

    python -m benchmarks.lm_memory [--vocab 50257] [--budget 2GB] [--samples 300] [--out DIR]

Setup (not measured): a small GPT-2 (2 layers, width 64, random weights, GPT-2's vocabulary size) saved with a
byte-level BPE tokenizer, and a LAYA head trained on it for one epoch (``laya train --task lm``) on made-up
sentences. Then ``laya audit MODEL --scope both --compare laya,ig,gradxact,atp`` runs twice as a subprocess:
with the default batch sizes (256 positions per batch, IG's 16–32 steps over them at once: every row of IG is a
V-wide logit vector) and with ``--max-memory BUDGET`` (the plan lowers IG's internal batch and the batch to fit).
Each reports its own peak RSS in its JSON (``peak_memory_mb``); printed side by side with the budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .say import say


def build(root: Path, vocab: int) -> Path:
    """The model folder, the corpus, the trained checkpoint (kept from an earlier run into the same ``--out``)."""
    if (root / "lm.pt").is_file():
        return root / "lm.pt"
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from benchmarks.synthetic import sentences

    texts = sentences(800)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    torch.manual_seed(0)  # the vocabulary beyond the tokenizer's ids is never fed, but every logit is computed
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_layer=2, n_embd=64, n_head=2, n_positions=64,
                                       initializer_range=0.3, eos_token_id=0))  # fmt: skip
    model.save_pretrained(root / "model")
    fast.save_pretrained(root / "model")
    (root / "corpus").mkdir()
    (root / "corpus" / "train.txt").write_text("\n".join(texts[:700]) + "\n")
    (root / "corpus" / "test.txt").write_text("\n".join(texts[700:]) + "\n")
    ckpt = root / "lm.pt"
    run([
        "train", "--task", "lm", "--backbone", f"hf:{root / 'model'}", "--dataset", f"text:{root / 'corpus'}",
        "--epochs", "1", "--block-size", "32", "--batch-size", "8", "--eval-tokens", "500", "--out", str(ckpt),
        "--quiet",
    ])  # fmt: skip
    return ckpt


def run(args: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "laya_cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"laya {' '.join(args[:2])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started


def audit(ckpt: Path, out: Path, samples: int, budget: str | None) -> tuple[dict, float]:
    args = ["audit", str(ckpt), "--samples", str(samples), "--scope", "both", "--compare", "laya,ig,gradxact,atp",
            "--json", str(out), "--quiet"]  # fmt: skip
    seconds = run(args + (["--max-memory", budget] if budget else []))
    return json.loads(out.read_text()), seconds


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--budget", default="1200MB")
    p.add_argument("--samples", type=int, default=300)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    root = a.out or Path(tempfile.mkdtemp(prefix="laya-lm-memory-"))
    root.mkdir(parents=True, exist_ok=True)
    say(f"setup: GPT-2 2 layers × 64, vocabulary {a.vocab:,}, LAYA head trained one epoch -> {root}")
    ckpt = build(root, a.vocab)
    rows = []
    for budget in (None, a.budget):
        doc, seconds = audit(ckpt, root / f"audit-{budget or 'default'}.json", a.samples, budget)
        rows.append((budget or "none (default batches)", doc, seconds))
    say(f"laya audit --scope both --compare laya,ig,gradxact,atp on {a.samples} positions, vocabulary {a.vocab:,}:")
    for name, doc, seconds in rows:
        plan = next((n for n in doc["notes"] if n.startswith("memory budget")), "")
        say(f"  --max-memory {name:24s} peak RSS {doc.get('peak_memory_mb') or float('nan'):8.0f} MiB  "
            f"{seconds:6.1f} s  {plan}")  # fmt: skip
    bounded = rows[1][1]
    peak, budget_mb = bounded.get("peak_memory_mb"), bounded.get("memory_budget_mb")
    verdict = "within" if peak is not None and budget_mb is not None and peak <= budget_mb else "OVER (target missed)"
    say(f"peak {peak:.0f} MiB with --max-memory {a.budget} ({budget_mb:.0f} MiB): {verdict} the budget; "
        f"without it {rows[0][1].get('peak_memory_mb', float('nan')):.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
