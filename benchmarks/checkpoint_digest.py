"""The cost of a checkpoint's integrity check (issue 66, docs/checkpoint.md "Integrity"): laya's ``read_checkpoint``
of a vit_base-sized checkpoint (``torch.load`` + the SHA-256 of every tensor and setting + the heads' finite check)
next to a plain ``torch.load`` of the same file, and ``save_checkpoint`` (which computes the digest) next to a plain
``torch.save``.

    python -m benchmarks.checkpoint_digest [--repeats 5] [--arch vit_base_patch16_224] [--dir DIR]

The checkpoint: the timm architecture's state dict with random weights (built from its config: no download) as the
backbone weights travelling in the file, a LAYA head over 12 layers of width 768 (d* 96, 1,000 classes) and its
reference. Each timing is the median of ``--repeats`` runs, with the fastest and slowest; the file is read once
before, so every repeat reads it from the page cache (the ratio is of the work, not of the disk). Ratios are of the
medians, all measured in this one process, one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def make_checkpoint(arch: str) -> dict:
    import timm
    import torch

    torch.manual_seed(0)
    weights = {k: v.detach().clone() for k, v in timm.create_model(arch, pretrained=False).state_dict().items()}
    L, d, d_star, classes = 12, 768, 96, 1000
    head = {}
    for i in range(L):
        head[f"adapters.{i}.weight"], head[f"adapters.{i}.bias"] = torch.randn(d_star, d), torch.randn(d_star)
    head |= {"scorer.0.weight": torch.randn(192, L * d_star), "scorer.0.bias": torch.randn(192),
             "scorer.2.weight": torch.randn(L, 192), "scorer.2.bias": torch.randn(L),
             "classifier.weight": torch.randn(classes, d_star), "classifier.bias": torch.randn(classes)}  # fmt: skip
    return {
        "task": "classify",
        "backbone": {"spec": {"name": f"timm:{arch}", "pretrained": False, "finetune": True}, "weights": weights},
        "layers": [f"blocks.{i}" for i in range(L)],
        "dims": [d] * L,
        "head": {"kind": "laya", "config": {"d_star": d_star}, "weights": head},
        "classes": [f"class {i}" for i in range(classes)],
        "dataset": {"name": "made-up"},
        "reference": [torch.randn(d) for _ in range(L)],
        "history": [{"epoch": e, "loss": 1.0 / e} for e in range(1, 51)],
        "metrics": {"test_accuracy": 0.5},
        "train_config": {"lr": 3e-4, "epochs": 50},
    }


def timed(fn, repeats: int) -> dict:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def run(arch: str, repeats: int, folder: Path) -> dict:
    import torch

    from laya_cli.model.checkpoint import read_checkpoint, save_checkpoint
    from laya_cli.model.integrity import content_digest

    ckpt = make_checkpoint(arch)
    path, plain = folder / "big.pt", folder / "plain.pt"
    tensors = [t for t in ckpt["backbone"]["weights"].values()] + list(ckpt["head"]["weights"].values())
    n_bytes = sum(t.numel() * t.element_size() for t in tensors)
    out = {"arch": arch, "tensor_bytes": n_bytes, "repeats": repeats}
    out["torch.save"] = timed(lambda: torch.save(ckpt, plain), repeats)
    out["save_checkpoint"] = timed(lambda: save_checkpoint(ckpt, path), repeats)
    out["file_bytes"] = path.stat().st_size
    path.read_bytes()  # into the page cache
    out["torch.load"] = timed(lambda: torch.load(path, map_location="cpu", weights_only=True), repeats)
    out["read_checkpoint"] = timed(lambda: read_checkpoint(path), repeats)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    out["digest alone"] = timed(lambda: content_digest(loaded), repeats)
    out["read ratio"] = out["read_checkpoint"]["median"] / out["torch.load"]["median"]
    out["save ratio"] = out["save_checkpoint"]["median"] / out["torch.save"]["median"]
    return out


def table(r: dict) -> str:
    mb = r["tensor_bytes"] / 2**20
    lines = [
        f"{r['arch']}: {mb:,.0f} MiB of tensors, a {r['file_bytes'] / 2**20:,.0f} MiB file; "
        f"median of {r['repeats']} (min-max)",
        "| step | seconds | MiB/s |",
        "|---|---|---|",
    ]
    for key in ("torch.load", "read_checkpoint", "digest alone", "torch.save", "save_checkpoint"):
        t = r[key]
        lines.append(f"| {key} | {t['median']:.3f} ({t['min']:.3f}-{t['max']:.3f}) | {mb / t['median']:,.0f} |")
    lines.append(f"read_checkpoint / torch.load: {r['read ratio']:.2f}x; save_checkpoint / torch.save: "
                 f"{r['save ratio']:.2f}x")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="vit_base_patch16_224")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the checkpoint is written (default: a temp folder)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="laya-digest-") as tmp:
        print(table(run(a.arch, a.repeats, Path(tmp))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
