"""GPU throughput: a frozen ViT-B/16 (extraction fp32 vs bf16, the audit vs plain inference), a language model
(``laya train --task lm`` and the per-token audit vs the model's own forward) and the audit against its floor on a
CNN tapped at its residual blocks (issue 65), each case selectable.

    python -m benchmarks.gpu [--case vit,lm,floor] [--json FILE] [--quick]
        vit: [--images 1024] [--audit-images 256] [--steps 32] [--repeats 3]
        lm:  [--layers 12 --width 768 --vocab 50257] [--glosses 20000] [--block-size 128] [--batch 16]
             [--eval-tokens 4096] [--audit-samples 256] [--pretrained DIR] [--out DIR]

Needs a CUDA device. Without one it prints one line saying so and exits 0 (nothing failed: there is
nothing to measure), so it can sit in any script. ``--quick`` runs every case asked for at tiny sizes, on the CPU
where there is no CUDA device (the code path checked in seconds; its figures say nothing of a GPU). (A hidden
``--device cpu`` runs the code path on the CPU: the
tests' smoke run on tiny sizes; bf16 autocast is off there, so both precisions are float32.)

vit. Model: timm ``vit_base_patch16_224`` with random weights (``pretrained=False``: no download; throughput
does not depend on the weights), frozen, tapped after its 12 blocks (CLS token), a LAYA head over them;
``--images`` seeded random 224×224 uint8 images in host memory (pinned copies, as laya's loaders give
them on CUDA).

  extraction  laya's own extraction (``features.extraction.extract``: batches of 256, pinned asynchronous
              copies, every tap pooled, features back on the host in float32) under ``--precision fp32``
              and ``--precision bf16`` (CUDA autocast): images per second.
  plain       one inference pass of the timm model (its own classifier) over ``--audit-images`` images,
              at the same precision as the audit's backbone pass.
  audit       what ``laya audit --compare ig,gradxact`` does for them: the backbone pass (features), then
              on the head laya, ig (32 steps), gradxact, random, the LOLO effects and the default metrics.

Timings: median of ``--repeats`` runs after one warm-up, with ``torch.cuda.synchronize`` around each.
Targets printed beside the figures: bf16 / fp32 extraction ≥ 1.5×; audit / plain ≤ 1.1× (issue 25's target
for the default audit); the whole run under 300 s.

lm (issue 49). Model: a GPT-2 built from its config (random weights, no download; 12 layers × width 768, heads of
64, vocabulary 50,257 by default: GPT-2 small's shape) with a byte-level BPE learnt on the text
(``benchmarks.lm_cost.build_model``), or ``--pretrained DIR``: a ``save_pretrained`` folder, or a cache holding
``benchmarks.causal_lm``'s SmolLM2-135M. Text: the first ``--glosses`` WordNet glosses, or made-up sentences where
WordNet is missing (``lm_cost.corpus_texts``). At ``fp32`` and at ``bf16`` (laya's LM path on CUDA: the frozen model
under ``runtime.device.autocast``, chosen with ``runtime.device.precision``), in one process, after one untimed
train and audit on a sliver of the text:

  forward     the model's own forward (``AutoModelForCausalLM``, ``output_hidden_states=True``, no grad) over
              exactly the blocks one epoch of ``laya train`` reads (``lm_cost.read_blocks``), before and after
              the train: their mean; tokens per second.
  train       ``train_lm`` (what ``laya train --task lm`` runs), one epoch, the default ``--lens``: / forward.
  audit       the per-token audit at head scope on ``--audit-samples`` positions (α and Δ, IG, Grad×Act:
              ``lm_cost.audit_seconds``) per position / the forward per token; α and Δ alone beside it.

Targets printed beside the figures (issue 49): train ≤ 3× the forward; audit ≤ 3× the forward per position.

floor (issue 65): ``benchmarks.audit_floor`` on timm resnet34 (random weights) tapped at its 13 residual blocks, 64
images at 224 px: the model's own forward, each scope's floor (head: the taps + L + 1 head passes; network: the taps
+ each bypassed block's suffix + L + 1 head passes), and ``laya audit``'s default at each scope (and the network
scope's default before, ig,gradxact), each as × the forward and × its scope's floor (goal ≤ 1.5×).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from .audit_speed import frozen_timm, timed

MODEL = "vit_base_patch16_224"


def build(device: str, name: str = MODEL):
    """(plain timm model ``name``, LayaModel over the same frozen weights)."""
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import LayaModel

    plain, backbone, spec = frozen_timm(name, device)
    dims = backbone.dims(backbone.probe_input(1))
    head = build_head("laya", dims, 10).eval().to(device)
    return plain, LayaModel(backbone, head, spec, "laya", [str(c) for c in range(10)], [torch.zeros(d) for d in dims])


def extraction_rate(model, images, precision: str, repeats: int, device: str = "cuda") -> float:
    """Images per second of laya's extraction at ``precision``."""
    from laya_cli.features.extraction import extract
    from laya_cli.runtime.device import precision as at

    labels = torch.zeros(len(images), dtype=torch.long)
    with at(precision):
        run = lambda: extract(model.backbone, images, labels, device=device, shard=False)
        return len(images) / timed(run, device, repeats, warmup=1)


def audit_and_plain(
    plain, model, images, precision: str, steps: int, repeats: int, device: str = "cuda"
) -> tuple[float, float]:
    """(seconds of the default audit, seconds of plain inference) on ``images`` at ``precision``."""
    from laya_cli.auditing.head_scope import run_audit
    from laya_cli.auditing.names import parse_methods
    from laya_cli.auditing.settings import AuditSettings
    from laya_cli.features.extraction import LayerFeatures, to_float_images
    from laya_cli.runtime.device import autocast, to_device
    from laya_cli.runtime.device import precision as at

    labels = torch.zeros(len(images), dtype=torch.long)
    settings = AuditSettings(steps=steps, batch_size=len(images), device=device)
    methods = parse_methods("ig,gradxact")

    def plain_pass():
        with torch.inference_mode(), autocast(device):
            return plain(model.backbone.adapter(to_float_images(to_device(images, device))))

    def audit():
        return run_audit(model, LayerFeatures(model.features(images), labels), methods, settings)

    with at(precision):
        return timed(audit, device, repeats, warmup=1), timed(plain_pass, device, repeats, warmup=1)


def run(
    images: int = 1024, audit_images: int = 256, steps: int = 32, repeats: int = 3, device="cuda", name=MODEL
) -> dict:
    """The figures of the module doc. ``device``/``name`` other than CUDA/ViT-B: only the tests' smoke run
    of the code path on a CPU (where bf16 autocast is off: both precisions then run fp32)."""
    from laya_cli.runtime import progress

    progress.set_enabled(False)
    start = time.perf_counter()
    plain, model = build(device, name)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (images, 3, 224, 224), dtype=torch.uint8, generator=g)
    on_gpu = device.startswith("cuda")
    x = x.pin_memory() if on_gpu else x
    where = torch.cuda.get_device_name() if on_gpu else device
    out = {"device": where, "model": name, "images": images, "audit_images": audit_images}
    for p in ("fp32", "bf16"):
        out[f"extract_{p}_img_s"] = extraction_rate(model, x, p, repeats, device)
        audit_s, plain_s = audit_and_plain(plain, model, x[:audit_images], p, steps, repeats, device)
        out[f"audit_{p}_s"], out[f"plain_{p}_s"], out[f"audit_over_plain_{p}"] = audit_s, plain_s, audit_s / plain_s
    out["bf16_over_fp32"] = out["extract_bf16_img_s"] / out["extract_fp32_img_s"]
    out["seconds"] = time.perf_counter() - start
    return out


def report(r: dict) -> list[str]:
    return [
        f"{r['model']} (frozen, random weights) + LAYA head over 12 blocks; {r['device']}",
        f"  extraction, fp32                    {r['extract_fp32_img_s']:9,.0f} images/s   ({r['images']} images)",
        f"  extraction, bf16 autocast           {r['extract_bf16_img_s']:9,.0f} images/s   "
        f"bf16 / fp32 = {r['bf16_over_fp32']:.2f}×   (target ≥ 1.5×)",
        f"  audit / plain inference, fp32       {r['audit_over_plain_fp32']:9.2f}×          "
        f"({r['audit_fp32_s']:.3f} s / {r['plain_fp32_s']:.3f} s, {r['audit_images']} images; target ≤ 1.1×)",
        f"  audit / plain inference, bf16       {r['audit_over_plain_bf16']:9.2f}×          "
        f"({r['audit_bf16_s']:.3f} s / {r['plain_bf16_s']:.3f} s, {r['audit_images']} images; target ≤ 1.1×)",
        f"  whole run                           {r['seconds']:9.0f} s          (target < 300 s)",
    ]


# --------------------------------------------------------------------------- the language-model case

LM_GOAL = 3.0  # issue 49: train ≤ 3× the model's forward; the per-token audit ≤ 3× the forward per position


def lm_model(work: Path, train: list[str], layers: int, width: int, vocab: int, block: int, pretrained) -> Path:
    """The case's model folder: ``pretrained`` (a ``save_pretrained`` folder, or a cache holding
    ``benchmarks.causal_lm``'s SmolLM2-135M; None, with one line said, when neither is there), else a from-config
    GPT-2 (random weights, heads of width 64)."""
    from .lm_cost import build_model

    if pretrained is None:
        return build_model(work, train, layers, width, vocab, block, heads=max(1, width // 64))
    pretrained = Path(pretrained)
    if (pretrained / "config.json").is_file():
        return pretrained
    from .causal_lm import pretrained_smollm2

    return pretrained_smollm2(pretrained)


def lm_run(
    device: str = "cuda",
    layers: int = 12,
    width: int = 768,
    vocab: int = 50_257,
    glosses: int = 20_000,
    block: int = 128,
    batch: int = 16,
    eval_tokens: int = 4096,
    audit_samples: int = 256,
    pretrained=None,
    work: Path | None = None,
) -> dict | None:
    """The LM figures of the module doc; ``device="cpu"`` and a tiny config: the tests' smoke run of the code path
    (bf16 autocast is off there: both precisions run fp32). None when ``pretrained`` cannot be had."""
    from transformers import AutoModelForCausalLM

    from laya_cli.runtime import progress
    from laya_cli.runtime.device import precision as at

    from . import lm_cost as cost

    progress.set_enabled(False)
    began = time.perf_counter()
    work = Path(work or tempfile.mkdtemp(prefix="gpu-lm-"))
    train, test, what = cost.corpus_texts(glosses)
    corpus = cost.write_corpus(work, train, test)
    model_dir = lm_model(work, train, layers, width, vocab, block, pretrained)
    if model_dir is None:
        return None
    blocks = cost.read_blocks(cost.language_model(model_dir), corpus, block, batch, 1337, eval_tokens)
    causal = AutoModelForCausalLM.from_pretrained(model_dir).eval().to(device)
    cfg = causal.config
    where = torch.cuda.get_device_name() if device.startswith("cuda") else device
    out = {"device": where, "model": f"{'pretrained ' + model_dir.name if pretrained else 'gpt2'} "
           f"{cfg.num_hidden_layers}x{cfg.hidden_size} v{cfg.vocab_size}", "text": what, "block": block,
           "batch": batch}  # fmt: skip
    args = argparse.Namespace(block_size=block, batch=batch, eval_tokens=eval_tokens)
    # warm-up, untimed: a train and an audit on a sliver of the text (first calls' imports, kernels, allocator)
    warm = cost.write_corpus(work / "warm-up", train[:200], test[:50])
    cost.train_seconds(model_dir, warm, work / "warm-up.pt", args, None, device)
    cost.audit_seconds(work / "warm-up.pt", 4, device)
    for p in ("fp32", "bf16"):
        with at(p):
            cost.forward_seconds(causal, blocks[:2], device)  # warm-up: kernels, allocator
            f1, tokens = cost.forward_seconds(causal, blocks, device)
            train_s, _ = cost.train_seconds(model_dir, corpus, work / f"lm-{p}.pt", args, None, device)
            f2, _ = cost.forward_seconds(causal, blocks, device)
            a = cost.audit_seconds(work / f"lm-{p}.pt", audit_samples, device)
        forward = (f1 + f2) / 2
        per_token, n = forward / tokens, a["positions"]
        out.update({f"forward_{p}_s": forward, f"forward_{p}_tok_s": tokens / forward, f"train_{p}_s": train_s,
                    f"train_over_forward_{p}": train_s / forward, f"audit_{p}_s": a["all"],
                    f"audit_laya_over_forward_{p}": a["laya"] / n / per_token,
                    f"audit_over_forward_{p}": a["all"] / n / per_token})  # fmt: skip
        out["tokens"], out["positions"] = tokens, n
    out["bf16_over_fp32"] = out["forward_bf16_tok_s"] / out["forward_fp32_tok_s"]
    out["seconds"] = time.perf_counter() - began
    return out


def lm_report(r: dict) -> list[str]:
    met = lambda ratio: "target met" if ratio <= LM_GOAL else "target MISSED"  # noqa: E731
    lines = [f"{r['model']} (laya train --task lm, default --lens); {r['text']}, blocks of {r['block']}, "
             f"batches of {r['batch']}; {r['device']}"]  # fmt: skip
    for p, what in (("fp32", "fp32"), ("bf16", "bf16 autocast")):
        lines += [
            f"  model forward + hidden states, {what:<13} {r[f'forward_{p}_tok_s']:9,.0f} tokens/s  "
            f"({r['tokens']:,} tokens, {r[f'forward_{p}_s']:.3f} s)",
            f"  train 1 epoch / forward, {p}         {r[f'train_over_forward_{p}']:9.2f}×         "
            f"({r[f'train_{p}_s']:.2f} s; target ≤ {LM_GOAL:g}×: {met(r[f'train_over_forward_{p}'])})",
            f"  audit / forward per position, {p}    {r[f'audit_over_forward_{p}']:9.2f}×         "
            f"(α, Δ, IG, Grad×Act on {r['positions']} positions, α and Δ alone "
            f"{r[f'audit_laya_over_forward_{p}']:.2f}×; target ≤ {LM_GOAL:g}×: {met(r[f'audit_over_forward_{p}'])})",
        ]
    lines += [
        f"  forward bf16 / fp32                 {r['bf16_over_fp32']:9.2f}×",
        f"  LM case                             {r['seconds']:9.0f} s",
    ]
    return lines


CASES = ("vit", "lm", "floor")
QUICK = {"images": 4, "audit_images": 2, "steps": 2, "repeats": 1, "layers": 2, "width": 32, "vocab": 512,
         "glosses": 60, "block_size": 16, "batch": 8, "eval_tokens": 64, "audit_samples": 4}  # fmt: skip


def floor_run(device: str, quick: bool) -> dict:
    """``benchmarks.audit_floor`` on a CNN tapped at its residual blocks (``--quick``: resnet18, 4 images of 32 px)."""
    from .audit_floor import measure, method_lists

    name, side, images, repeats = ("resnet18", 32, 4, 1) if quick else ("resnet34", 224, 64, 3)
    return measure(name, side, images, repeats, device, method_lists(None, "ig,gradxact"))


def cases(text: str) -> list[str]:
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in chosen if c not in CASES]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of {', '.join(CASES)}")
    return chosen


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    ap.add_argument("--case", type=cases, default=list(CASES), help="vit, lm, floor (default: all three)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, on the CPU without CUDA: the code path only")
    ap.add_argument("--images", type=int, default=1024, help="vit: images for the extraction rates")
    ap.add_argument("--audit-images", type=int, default=256, help="vit: images for the audit / plain ratio")
    ap.add_argument("--steps", type=int, default=32, help="vit: IG steps")
    ap.add_argument("--repeats", type=int, default=3, help="vit: timed runs (the median)")
    ap.add_argument("--layers", type=int, default=12, help="lm: the from-config GPT-2's layers")
    ap.add_argument("--width", type=int, default=768, help="lm: its width")
    ap.add_argument("--vocab", type=int, default=50_257, help="lm: its vocabulary")
    ap.add_argument("--glosses", type=int, default=20_000, help="lm: WordNet glosses (or made-up sentences)")
    ap.add_argument("--block-size", type=int, default=128, help="lm: tokens per block")
    ap.add_argument("--batch", type=int, default=16, help="lm: blocks per batch")
    ap.add_argument("--eval-tokens", type=int, default=4096, help="lm: held-out positions of train's evaluation")
    ap.add_argument("--audit-samples", type=int, default=256, help="lm: positions the audit reads")
    ap.add_argument("--pretrained", type=Path, metavar="DIR", help="lm: a save_pretrained folder (or a cache "
                    "holding benchmarks.causal_lm's SmolLM2-135M) instead of the from-config GPT-2")  # fmt: skip
    ap.add_argument("--out", type=Path, help="lm: the folder for the corpus, model and checkpoints (default: temp)")
    ap.add_argument("--json", dest="json_out", default=None, help="write the figures to this file")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: the tests' smoke run
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    from .say import say

    args = parse(argv)
    if args.quick:
        vars(args).update(QUICK)
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        say("no CUDA device on this machine: python -m benchmarks.gpu measures GPU throughput, nothing measured")
        return {"cuda": False}
    results = {}
    if "vit" in args.case:
        name = "vit_tiny_patch16_224" if args.quick else MODEL
        r = run(args.images, min(args.audit_images, args.images), args.steps, args.repeats, args.device, name)
        results["vit"] = r
        for line in report(r):
            say(line)
    if "lm" in args.case:
        r = lm_run(args.device, args.layers, args.width, args.vocab, args.glosses, args.block_size, args.batch,
                   args.eval_tokens, args.audit_samples, args.pretrained, args.out)  # fmt: skip
        if r is None:
            say(f"lm: skipped ({args.pretrained} holds no model; see the line above)")
        else:
            results["lm"] = r
            for line in lm_report(r):
                say(line)
    if "floor" in args.case:
        from .audit_floor import table

        results["floor"] = floor_run(args.device, args.quick)
        for line in table(results["floor"]):
            say(line)
    if args.json_out:
        from laya_cli.runtime.fileio import atomic_write_text

        atomic_write_text(args.json_out, json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
