"""Language models at the model's own cost (issue 49): ``laya train --task lm`` and the per-token audit, each next
to the model's own forward with hidden states over the same tokens, in one process, side by side.

    python -m benchmarks.lm_cost [--layers 30 --width 64 --vocab 6144] [--glosses 1500] [--block-size 64]
                                 [--eval-tokens 2000] [--lens tuned,logit,none] [--lens-sample 16]
                                 [--lens-tokens 256]
                                 [--audit-samples 200] [--before /work/main] [--pretrained CACHE] [--out DIR]
    python -m benchmarks.lm_cost --cell --model MODEL_DIR --corpus CORPUS_DIR [--terms]   # one timed cell

``--cell``: one fresh process's measurement (the forward, ``train_lm`` for one epoch with the default lens and
``--align 0 --exit-aware 0``, or the defaults' terms with ``--terms``, the forward again), one JSON line with
``ratio`` = train / the mean of the two forwards; run it in a loop for rounds (docs/results/dispatch.md).

The model: a GPT-2 built from its config (random weights: the cost is the point, not what it predicts) with a large
vocabulary and many layers — 30 × width 64, vocabulary 6,144 by default (``--vocab 49152``: SmolLM2's), or, with
``--pretrained CACHE``, the real SmolLM2-135M (30 layers, width 576, vocabulary 49,152; ``python -m
benchmarks.causal_lm --pretrained``; skipped in one line when it cannot be had). The text: the first ``--glosses``
WordNet glosses (split as ``benchmarks.causal_lm`` splits them), or made-up sentences where WordNet is missing.

Measured, in this process: the model's own forward (``AutoModelForCausalLM``, ``output_hidden_states=True``, no
grad) over exactly the blocks ``laya train`` reads (the training blocks of one epoch and the held-out blocks of its
evaluation), before and after the runs; ``train_lm`` (what ``laya train --task lm`` runs) for each ``--lens``;
the per-token audit at head scope (α and the leave-one-layer-out Δ, then IG, then Grad×Act; ``token_audit_job``)
per audited position; the held-out lens table on ``--lens-tokens`` sampled positions against the exact table
on every position (its error and whether the exact value lies in the sampled table's 95 % interval); the peak
memory of an audit under ``--max-memory``. ``--before PATH``: the same forward and train measured in a child
process running another checkout's laya (``PYTHONPATH=PATH``; main before this issue), its ratio printed beside.

Goals (issue 49): train ≤ 3× the forward; audit ≤ 3× the forward per position; the lens KL within 1 % of the exact
one where approximated; peak memory within --max-memory. Each is printed "target met" or "target MISSED".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
GOAL = 3.0


def say(line: str) -> None:
    print(line, flush=True)


def sync(device: str) -> None:
    """Wait for the work queued on a CUDA ``device`` (a timer around it then measures it); elsewhere nothing."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- fixture


def corpus_texts(n: int) -> tuple[list[str], list[str], str]:
    """(train, test, what): the first ``n`` WordNet glosses split by their hash, or made-up sentences."""
    sys.path.insert(0, str(HERE.parent.parent))
    from benchmarks.causal_lm import gather_glosses, split_glosses, wordnet_root

    root = wordnet_root()
    if root is not None:
        train, test = split_glosses(gather_glosses(root)[:n])
        return train, test, f"{n} WordNet glosses"
    from benchmarks.synthetic import sentences

    texts = sentences(n)
    return texts[: n * 9 // 10], texts[n * 9 // 10 :], f"{n} made-up sentences (WordNet is missing)"


def write_corpus(root: Path, train: list[str], test: list[str]) -> Path:
    folder = root / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (folder / "test.txt").write_text("\n".join(test) + "\n", encoding="utf-8")
    return folder


def build_model(root: Path, train: list[str], layers: int, width: int, vocab: int, block: int, heads: int = 4) -> Path:
    """A from-config GPT-2 with ``vocab`` outputs and a byte-level BPE learnt on the text (the ids it makes are a
    prefix of the model's vocabulary: the readout still spans all of it)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from benchmarks.causal_lm import save_atomic, train_tokenizer

    folder = root / f"gpt2-{layers}x{width}-v{vocab}"
    if (folder / "config.json").is_file():
        return folder
    tokenizer = train_tokenizer(train, min(vocab, 4096))
    config = GPT2Config(vocab_size=vocab, n_positions=block, n_embd=width, n_layer=layers, n_head=heads,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    save_atomic(GPT2LMHeadModel(config).eval(), tokenizer, folder)
    return folder


# --------------------------------------------------------------------------- measurements (laya_cli of this process)


def language_model(model_dir: Path):
    from laya_cli.backbones.lm import build_language_model
    from laya_cli.backbones.spec import BackboneSpec

    return build_language_model(BackboneSpec(f"hf:{model_dir}", task="lm"))


def read_blocks(lm, corpus_dir: Path, block: int, batch: int, seed: int, eval_tokens: int) -> list:
    """The token batches ``laya train --task lm`` reads in one epoch: the shuffled training blocks, then the
    held-out blocks of its evaluation (whole batches until ``eval_tokens`` positions)."""
    from laya_cli.data.corpus import open_corpus
    from laya_cli.features.lm_positions import batches

    corpus = open_corpus(str(corpus_dir))
    out = list(batches(lm, corpus, "train", block, batch, seed=seed + 1))
    n = 0
    for x in batches(lm, corpus, "test", block, batch):
        out.append(x)
        n += x.shape[0] * (x.shape[2] - 1)
        if n >= eval_tokens:
            break
    return out


def forward_seconds(causal, blocks, device: str = "cpu") -> tuple[float, int]:
    """The model's own forward with hidden states over ``blocks`` (copied to ``device``, where ``causal`` is; on
    CUDA under laya's autocast and synchronised around): (seconds, tokens)."""
    import torch

    from laya_cli.runtime.device import autocast

    sync(device)
    start, tokens = time.perf_counter(), 0
    with torch.no_grad(), autocast(device):
        for x in blocks:
            x = x.to(device)
            causal(input_ids=x[:, 0], attention_mask=x[:, 1], output_hidden_states=True)
            tokens += x[:, 0].numel()
    sync(device)
    return time.perf_counter() - start, tokens


def train_seconds(
    model_dir: Path, corpus_dir: Path, out: Path, args, lens: str | None, device: str = "cpu"
) -> tuple[float, dict]:
    """``train_lm`` (what ``laya train --task lm`` runs), one epoch on ``device``; ``lens`` None: a laya without
    ``--lens`` (its default)."""
    from laya_cli.runtime.declare import build
    from laya_cli.training.lm import train_lm
    from laya_cli.training.settings import TrainJobSettings

    extra = {} if lens is None else {"lens": lens, "lens_sample": args.lens_sample, "lens_tokens": args.lens_tokens}
    values = {"task": "lm", "backbone": f"hf:{model_dir}", "dataset": f"text:{corpus_dir}",
              "block_size": args.block_size, "batch_size": args.batch, "epochs": 1, "lr": 1e-3,
              "eval_tokens": args.eval_tokens, "device": device, **extra}  # fmt: skip
    if not getattr(args, "terms", False):  # the training terms off unless asked: the step's own cost
        values |= {"align": 0.0, "exit_aware": 0.0}
    req = build(TrainJobSettings, values, out=str(out))
    sync(device)
    start = time.perf_counter()
    ckpt = train_lm(req)
    sync(device)
    return time.perf_counter() - start, ckpt


def child(args) -> None:
    """``--cell`` (``--child``): forward, train, forward with the laya on ``PYTHONPATH``; one JSON line, the ratio
    being train / the mean of the two forwards (both printed: on a shared machine they differ), in wall-clock
    seconds and in this process's CPU seconds (``cpu_*``: what another process's load takes from the wall clock
    is not in them)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    lm = language_model(args.model)
    blocks = read_blocks(lm, args.corpus, args.block_size, args.batch, 1337, args.eval_tokens)
    causal = AutoModelForCausalLM.from_pretrained(args.model).eval()
    c0 = time.process_time()
    f1, tokens = forward_seconds(causal, blocks)
    c1 = time.process_time()
    seconds, ckpt = train_seconds(args.model, args.corpus, Path(tempfile.mkdtemp()) / "lm.pt", args, None)
    c2 = time.process_time()
    f2, _ = forward_seconds(causal, blocks)
    c3 = time.process_time()
    cpu_forward, cpu_train = [c1 - c0, c3 - c2], c2 - c1
    print(json.dumps({"forward": [f1, f2], "tokens": tokens, "train": seconds, "ratio": seconds / ((f1 + f2) / 2),
                      "cpu_forward": cpu_forward, "cpu_train": cpu_train,
                      "cpu_ratio": cpu_train / (sum(cpu_forward) / 2),
                      "align": ckpt["train_config"].get("align", 0.0),
                      "exit_aware": ckpt["train_config"].get("exit_aware", 0.0)}))  # fmt: skip


def lens_error(model_dir: Path, corpus_dir: Path, ckpt_path: Path, args) -> dict:
    """The held-out lens table on ``--lens-tokens`` sampled positions against the exact one on every position:
    per layer, |sampled − exact| / exact and whether the exact value lies in the sampled 95 % interval."""
    from laya_cli.data.corpus import open_corpus
    from laya_cli.features.lm_positions import batches
    from laya_cli.model.checkpoint import read_checkpoint
    from laya_cli.model.lm_heads import lm_from_checkpoint
    from laya_cli.training.lm import evaluate

    model = lm_from_checkpoint(read_checkpoint(ckpt_path))
    corpus = open_corpus(str(corpus_dir))
    held = lambda: batches(model.lm, corpus, "test", args.block_size, args.batch)  # noqa: E731
    runs = {}
    for k in (0, args.lens_tokens):
        start = time.perf_counter()
        runs[k] = evaluate(model.lm, model.laya, model.tuned, held(), args.eval_tokens, "tuned", k)
        runs[k]["seconds"] = time.perf_counter() - start
    exact, sampled = runs[0], runs[args.lens_tokens]
    out = {"exact_seconds": exact["seconds"], "sampled_seconds": sampled["seconds"], "figures": {},
           "exact_tokens": exact["lens"]["tokens"], "sampled_tokens": sampled["lens"]["tokens"]}  # fmt: skip
    for key in ("tuned_kl", "logit_kl"):
        errors, inside = [], 0
        for e, s in zip(exact["layers"], sampled["layers"]):
            if e[key] > 1e-9:
                errors.append(abs(s[key] - e[key]) / e[key])
                inside += abs(s[key] - e[key]) <= s[f"{key}_ci"]
        out["figures"][key] = {"max": max(errors), "mean": sum(errors) / len(errors), "inside": inside,
                               "layers": len(errors)}  # fmt: skip
    return out


def audit_seconds(ckpt_path: Path, samples: int, device: str = "cpu") -> dict:
    """The per-token audit at head scope on ``samples`` held-out positions: reading their states (the model's
    forward over the held-out blocks), then α with Δ (L+1 head passes: every audit's part), with IG, with
    Grad×Act, with both (``token_audit_job``, after one warm-up run); IG's mean steps per position."""
    from laya_cli.auditing.lm import token_audit_job, token_data
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.model.checkpoint import read_checkpoint
    from laya_cli.model.lm_heads import lm_from_checkpoint

    model = lm_from_checkpoint(read_checkpoint(ckpt_path)).to(device)
    sync(device)
    start = time.perf_counter()
    data = token_data(model, None, samples, 8)
    sync(device)
    out = {"data": time.perf_counter() - start, "positions": len(data.features)}
    out["data_tokens"] = sum(x[:, 0].numel() for x in data.blocks)
    runs = (("warm-up", ["laya"]), ("laya", ["laya"]), ("ig", ["laya", "ig"]), ("gradxact", ["laya", "gradxact"]),
            ("all", ["laya", "ig", "gradxact"]))  # fmt: skip
    for name, methods in runs:
        sync(device)
        start = time.perf_counter()
        result = token_audit_job(model, methods, AuditSettings(device=device).validate(), "head", None, samples,
                                 None, data)  # fmt: skip
        sync(device)
        out[name] = time.perf_counter() - start
        if name == "ig":
            out["ig_steps"] = (result.methods["ig"].ig_steps or {}).get("mean")
    return out


def train_in_a_log(model_dir: Path, corpus_dir: Path, out: Path, args) -> dict:
    """``laya train --task lm`` (the default --lens) in a fresh process writing into a log (a pipe), progress every
    5 s: its peak RSS (``wait4``), its wall time and the progress lines it printed."""
    cmd = [sys.executable, "-m", "laya_cli", "train", "--task", "lm", "--backbone", f"hf:{model_dir}", "--dataset",
           f"text:{corpus_dir}", "--epochs", "1", "--block-size", str(args.block_size), "--batch-size", str(args.batch),
           "--eval-tokens", str(args.eval_tokens), "--lens-sample", str(args.lens_sample), "--lens-tokens",
           str(args.lens_tokens), "--device", "cpu", "--out", str(out), "--overwrite"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), LAYA_PROGRESS_INTERVAL="5")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    log = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    lines = [line for line in log.splitlines() if line.startswith(("epoch 1: ", "held-out evaluation: "))]
    return {"seconds": time.perf_counter() - start, "peak_mb": usage.ru_maxrss / 1024, "status": status,
            "progress": lines}  # fmt: skip


def audit_memory(ckpt_path: Path, samples: int, max_memory: str) -> dict | None:
    """``laya audit --compare laya,ig,gradxact --max-memory BUDGET`` in a fresh process: its JSON's budget and
    peak (the process's peak RSS on the CPU)."""
    out = Path(tempfile.mkdtemp()) / "audit.json"
    cmd = [sys.executable, "-m", "laya_cli", "audit", str(ckpt_path), "--samples", str(samples), "--compare",
           "laya,ig,gradxact", "--max-memory", max_memory, "--json", str(out), "--quiet"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if not out.is_file():
        say(f"  laya audit --max-memory failed ({r.returncode}): {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return json.loads(out.read_text())


# --------------------------------------------------------------------------- the report


def verdict(ok: bool) -> str:
    return "target met" if ok else "target MISSED"


def run_case(name: str, model_dir: Path, corpus_dir: Path, work: Path, args) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    lm = language_model(model_dir)
    blocks = read_blocks(lm, corpus_dir, args.block_size, args.batch, 1337, args.eval_tokens)
    causal = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    cfg = causal.config
    say(f"\n== {name}: {cfg.num_hidden_layers} layers, width {cfg.hidden_size}, vocabulary {cfg.vocab_size}")
    forwards, tokens = [], 0
    f, tokens = forward_seconds(causal, blocks)
    forwards.append(f)
    say(f"model forward with hidden states: {tokens:,} tokens in {f:.2f} s ({tokens / f:,.0f} tokens/s)")
    trains, ckpts = {}, {}
    for lens in args.lens:
        trains[lens], _ = train_seconds(model_dir, corpus_dir, work / f"{name}-{lens}.pt", args, lens)
        ckpts[lens] = work / f"{name}-{lens}.pt"
        f, _ = forward_seconds(causal, blocks)
        forwards.append(f)
    forward = sum(forwards) / len(forwards)
    say(f"model forward, {len(forwards)} times between the runs: " + ", ".join(f"{s:.2f}" for s in forwards) +
        f" s; mean {forward:.2f} s")  # fmt: skip
    say(f"laya train --task lm --epochs 1 --block-size {args.block_size} --batch-size {args.batch} "
        f"--eval-tokens {args.eval_tokens} --lens-sample {args.lens_sample} "
        f"--lens-tokens {args.lens_tokens}:")  # fmt: skip
    for lens, s in trains.items():
        say(f"  --lens {lens:<5}  {s:7.2f} s  = {s / forward:5.2f}x the forward  {verdict(s / forward <= GOAL)}")
    if args.before:
        before = before_run(model_dir, corpus_dir, args)
        if before:
            fb = sum(before["forward"]) / 2
            say(f"  before ({args.before}, its own forward {fb:.2f} s): {before['train']:7.2f} s = "
                f"{before['train'] / fb:5.2f}x the forward")  # fmt: skip
    if "tuned" in ckpts and args.lens_tokens:
        e = lens_error(model_dir, corpus_dir, ckpts["tuned"], args)
        say(
            f"held-out lens table: exact on {e['exact_tokens']:,} positions {e['exact_seconds']:.2f} s; sampled "
            f"(--lens-tokens {args.lens_tokens}) on {e['sampled_tokens']:,} positions {e['sampled_seconds']:.2f} s"
        )
        for key, v in e["figures"].items():
            say(
                f"  {key}: |sampled − exact| / exact per layer: mean {v['mean']:.1%}, max {v['max']:.1%}; exact "
                f"inside the sampled 95 % interval at {v['inside']}/{v['layers']} layers  {verdict(v['max'] <= 0.01)}"
            )
    audited = ckpts.get("tuned") or next(iter(ckpts.values()))
    a = audit_seconds(audited, args.audit_samples)
    per_token, n = forward / tokens, a["positions"]
    say(f"per-token audit, head scope, {n} positions (the model's forward: {per_token * 1e3:.3f} ms per token):")
    say(f"  reading their states: the model's forward over {a['data_tokens']:,} tokens of whole held-out blocks, "
        f"{a['data'] / a['data_tokens'] / per_token:.2f}x the forward per token")  # fmt: skip
    for key, what in (("laya", "α and Δ (L+1 head passes)"), ("ig", "α, Δ and IG"),
                      ("gradxact", "α, Δ and Grad×Act"), ("all", "α, Δ, IG and Grad×Act")):  # fmt: skip
        ratio = a[key] / n / per_token
        say(f"  {what:<26} {a[key]:7.2f} s = {ratio:6.2f}x the forward per position  {verdict(ratio <= GOAL)}")
    for key in ("ig", "gradxact"):
        ratio = (a[key] - a["laya"]) / n / per_token
        steps = f" (mean {a['ig_steps']:.1f} steps)" if key == "ig" and a.get("ig_steps") else ""
        say(f"  {key} alone (over α and Δ){steps}: {ratio:6.2f}x the forward per position  {verdict(ratio <= GOAL)}")
    if args.log_run:
        t = train_in_a_log(model_dir, corpus_dir, work / f"{name}-log.pt", args)
        say(f"laya train --task lm in a fresh process into a log: {t['seconds']:.1f} s, peak RSS "
            f"{t['peak_mb']:.0f} MB, {len(t['progress'])} progress lines, e.g.:")  # fmt: skip
        for line in t["progress"][:2] + t["progress"][-1:]:
            say(f"    {line.strip()}")
    if args.max_memory:
        doc = audit_memory(audited, args.audit_samples, args.max_memory)
        if doc:
            peak, budget = doc.get("peak_memory_mb"), doc.get("memory_budget_mb")
            say(f"  laya audit --compare laya,ig,gradxact --max-memory {args.max_memory} (a fresh process): peak "
                f"{peak} MB ({doc.get('peak_memory_measure')}), budget {budget} MB  "
                f"{verdict(peak is not None and budget is not None and peak <= budget)}")  # fmt: skip
    say(f"peak RSS of this process so far: {peak_rss_mb():.0f} MB")


def before_run(model_dir: Path, corpus_dir: Path, args) -> dict | None:
    cmd = [sys.executable, str(HERE), "--child", "--model", str(model_dir), "--corpus", str(corpus_dir),
           "--block-size", str(args.block_size), "--batch", str(args.batch), "--eval-tokens", str(args.eval_tokens),
           "--threads", str(args.threads)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(args.before))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if r.returncode != 0:
        say(f"  before: the run with {args.before} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.lm_cost", description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--vocab", type=int, default=6144)
    p.add_argument("--glosses", type=int, default=1500)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--eval-tokens", type=int, default=2000)
    p.add_argument("--lens", type=lambda s: s.split(","), default=["tuned", "logit", "none"])
    p.add_argument("--lens-sample", type=int, default=16)
    p.add_argument("--lens-tokens", type=int, default=256)
    p.add_argument("--audit-samples", type=int, default=128)
    p.add_argument("--max-memory", default="2G", help="the audit's budget, checked in a fresh process ('' : not)")
    p.add_argument("--log-run", action="store_true", help="laya train in a fresh process too: peak RSS, progress")
    p.add_argument("--before", type=Path, help="another checkout's laya (PYTHONPATH), measured in a child process")
    p.add_argument("--pretrained", type=Path, metavar="CACHE", help="SmolLM2-135M too (benchmarks.causal_lm)")
    p.add_argument("--no-fixture", action="store_true", help="only the --pretrained model")
    p.add_argument("--out", type=Path)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--child",
        "--cell",
        action="store_true",
        help="one cell: --model's forward, train_lm one epoch, the forward again; one JSON line",
    )
    p.add_argument("--model", type=Path, help="--cell: the model folder")
    p.add_argument("--corpus", type=Path, help="--cell: the text: corpus folder")
    p.add_argument("--terms", action="store_true", help="--cell: train with the defaults' --align/--exit-aware")
    args = p.parse_args(argv)
    for flag, folder in (("--model", args.model), ("--corpus", args.corpus)):
        if args.child and (folder is None or not folder.is_dir()):
            p.error(f"--cell needs {flag} FOLDER, an existing folder" + (f" (not {folder})" if folder else ""))
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        child(args)
        return 0
    os.environ.setdefault("LAYA_PROGRESS_INTERVAL", "60")
    work = args.out or Path(tempfile.mkdtemp(prefix="lm-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    train, test, what = corpus_texts(args.glosses)
    corpus_dir = write_corpus(work, train, test)
    say(f"lm_cost: {what}, blocks of {args.block_size}, batches of {args.batch}, {args.threads} thread(s) -> {work}")
    if not args.no_fixture:
        model_dir = build_model(work, train, args.layers, args.width, args.vocab, args.block_size)
        run_case(f"gpt2 {args.layers}x{args.width} v{args.vocab}", model_dir, corpus_dir, work, args)
    if args.pretrained:
        from benchmarks.causal_lm import pretrained_smollm2

        folder = pretrained_smollm2(args.pretrained)  # says in one line why there is none
        if folder is None:
            say("SmolLM2-135M: skipped (it could not be had; see the line above)")
        else:
            run_case("SmolLM2-135M", folder, corpus_dir, work, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
