"""Which layers can go: `laya depth --drop K --out` on a pretrained encoder, a timm ViT and a decoder.

    python -m benchmarks.dropping [CHECKPOINT ...] [--case vit,gpt2] [--k 2] [--draws 3] [--out DIR]
                                  [--align-target head|network]

Each checkpoint (given, or trained here as a user would: ``--case vit`` a timm ``VisionTransformer`` of 8 blocks
trained end to end on digits, ``--case gpt2`` a GPT-2 of 8 layers built from its config and trained end to end on
2,000 WordNet noun glosses in 8 classes, ``benchmarks.minilm``'s data) goes through the command a user types,
``laya depth CKPT --drop K --out DIR/NAME-dropped.pt --json …``: the drop table (LAYA's α, Block Influence, the
network-scope bypass effects, the reverse order, a greedy oracle on validation accuracy, seeded random orders;
chosen on the validation split, accuracy on the test split with Wilson 95 % intervals), the FLOPs of each dropped
model and the α order's measured speed-up. Prints, per checkpoint, whether α-guided dropping is within 1 pp of the
greedy oracle at 25 % of the layers dropped, ahead of Block Influence and no worse than reverse, and whether the
measured speed-up matches the FLOPs (issue 35's goals); a goal missed is printed as "target missed".
``--align-target network`` trains the cases with ``--align 1 --align-target network`` (α ranked against the
network-scope effects, issue 47) as ``NAME-net``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = ("vit", "gpt2")


def small_vit():
    """A timm VisionTransformer for 8×8 one-channel digits: 2×2 patches (16 tokens and a class token), 8 blocks."""
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=8, patch_size=2, in_chans=1, num_classes=0, embed_dim=64, depth=8, num_heads=4)


def laya(*args) -> None:
    cmd = [sys.executable, "-m", "laya_cli", *map(str, args)]
    print("$ laya " + " ".join(map(str, args)), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit(f"failed: laya {' '.join(map(str, args))}")


def train_case(case: str, out: Path, align: tuple = ()) -> Path | None:
    """The case's checkpoint, trained with ``laya train`` (skipped in one line when its data is missing); ``align``:
    more ``laya train`` options (the network target's), the checkpoint then named ``CASE-net``."""
    ckpt = out / f"{case}{'-net' if align else ''}.pt"
    if ckpt.exists():
        return ckpt
    if case == "vit":
        laya("train", "--arch", "benchmarks.dropping:small_vit", "--layers", "blocks.*", "--finetune",
             "--dataset", "digits", "--epochs", 30, "--seed", 0, "--out", ckpt, "-q", *align)  # fmt: skip
        return ckpt
    from .minilm import wordnet_csv

    data = wordnet_csv(out / "wordnet-nouns-8.csv")
    if data is None:
        print("gpt2: no WordNet (Debian's wordnet-base) on this machine: skipped")
        return None
    import transformers

    folder = out / "gpt2-8"
    config = transformers.GPT2Config(
        vocab_size=4096, n_embd=128, n_layer=8, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    transformers.GPT2Model(config).save_pretrained(folder)
    laya("train", "--backbone", f"hf:{folder}", "--finetune", "--dataset", f"csv:{data}", "--max-length", 32,
         "--epochs", 15, "--seed", 0, "--out", ckpt, "-q", *align)  # fmt: skip
    return ckpt


def report(name: str, doc: dict) -> None:
    """The goals of issue 35 read off one drop JSON."""
    g, w = doc.get("goals"), doc.get("written") or {}
    if g is not None:
        near = "met" if g["within_1pp_of_greedy"] else "target missed"
        ahead = "met" if g["ahead_of_block_influence"] else "target missed"
        print(f"{name}: at k={g['k']} alpha {g['alpha']:.3f}, greedy {g['greedy']:.3f} (within 1 pp: {near}), "
              f"block influence {g['block_influence']:.3f} (alpha ahead: {ahead})")  # fmt: skip
        if g.get("reverse") is not None:
            verdict = "met" if g["no_worse_than_reverse"] else "target missed"
            print(f"{name}: at k={g['k']} reverse order {g['reverse']:.3f} (alpha no worse: {verdict})")
    for t in doc.get("timing", [])[1:]:
        ratio = t["speedup"] / t["flops_speedup"]
        verdict = "matches" if ratio >= 0.9 else "target missed: below"
        print(f"{name}: k={t['k']} measured speed-up {t['speedup']:.2f}× vs FLOPs {t['flops_speedup']:.2f}× "
              f"({verdict} the FLOPs, ratio {ratio:.2f})")  # fmt: skip
    if w:
        print(f"{name}: wrote {w['out']}: accuracy {w['test_accuracy']:.4f} (full {w['full_test_accuracy']:.4f})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", type=Path, nargs="*")
    parser.add_argument("--case", default="", help=f"train and drop these cases too: {','.join(CASES)}")
    parser.add_argument("--k", type=int, default=2, help="the most layers dropped")
    parser.add_argument("--draws", type=int, default=3, help="random orders")
    parser.add_argument("--out", type=Path, default=None, help="where checkpoints and tables go (default: a temp dir)")
    parser.add_argument("--align-target", choices=("head", "network"), default="head",
                        help="network: train the cases with --align 1 --align-target network (NAME-net)")  # fmt: skip
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="laya-dropping-"))
    out.mkdir(parents=True, exist_ok=True)
    cases = [c for c in args.case.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}: choose from {', '.join(CASES)}")
    align = ("--align", 1, "--align-target", "network") if args.align_target == "network" else ()
    ckpts = [(p.stem, p) for p in args.checkpoints] + [
        (c + ("-net" if align else ""), train_case(c, out, align)) for c in cases
    ]
    for name, ckpt in ckpts:
        if ckpt is None:
            continue
        table = out / f"{name}-drop.json"
        extra = ["--arch", "benchmarks.dropping:small_vit"] if name.startswith("vit") else []
        laya("depth", ckpt, "--drop", args.k, "--draws", args.draws, "--out", out / f"{name}-dropped.pt",
             "--json", table, "--markdown", out / f"{name}-drop.md", *extra)  # fmt: skip
        report(name, json.loads(table.read_text()))
    print(f"tables and checkpoints: {out}")


if __name__ == "__main__":
    main()
