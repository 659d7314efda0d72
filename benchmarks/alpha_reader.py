"""What α's positions reader (``--alpha-reader positions``, issue 74) costs next to the pooled scorer, and whether it
trains: the two side by side in one run.

    python -m benchmarks.alpha_reader [--cases cnn,timm:resnet18,timm:vit_tiny_patch16_224] [--side 64]
                                      [--batch 32] [--repeats 5] [--faithfulness] [--epochs 15] [--lr 3e-3]
                                      [--samples 200]

Cost, per case (a randomly initialised tapped backbone at ``--side`` px, a seeded batch of ``--batch`` images, in
this process): per sample, the backbone pass that leaves r_i alone vs r_i packed with its positions (what a frozen
backbone's feature extraction runs once), the bytes one sample's features take in the feature cache (float32, and
float16 with ``--feature-dtype float16``), and a LAYA head's training step on those features (forward + backward):
its time and the bytes autograd keeps for the backward (the head's activation memory, counted with
``saved_tensors_hooks``: the same figure on any device), with the head's parameter count. Each time is the fastest
of ``--repeats`` rounds (after one warm-up); the bytes and parameters are exact. Text models are not run here:
their packed row is d_i + max_length·(d_i + 1) wide (docs/backbones.md), their cost the same arithmetic.

``--faithfulness``: the built-in CNN frozen on digits, trained ``--epochs`` at ``--lr`` with ``--align 1
--align-target network`` under each reader (same seed), then ``laya audit --scope network --compare atp`` on
``--samples`` test samples: test accuracy, α's and AtP's faithfulness at network scope. One seed, a tiny case: it
shows the reader trains and how far it moves α, not which default to take (issue 74's ceilings and seeds decide).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

READERS = ("pooled", "positions")


def _fastest_s(fn, repeats: int) -> float:
    """The fastest of ``repeats`` rounds: on a shared machine the slower rounds measure the neighbours."""
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _saved_bytes(fn) -> int:
    """Bytes of the tensors autograd saves for the backward while ``fn`` runs its forward."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def _backbone(name: str, side: int):
    from laya_cli.backbones.build import BackboneSpec, build_backbone

    torch.manual_seed(0)
    builtin = name in ("mlp", "cnn")
    spec = BackboneSpec(
        name, in_channels=1 if builtin else 3, image_size=(side, side), input_size=None if builtin else side
    )
    return build_backbone(spec).eval()


def _head_step(head, feats):
    def step():
        head.zero_grad()
        out = head(feats)
        loss = out.logits.logsumexp(-1).mean() + out.alpha.square().mean()
        loss.backward()

    return step


def cost(name: str, side: int, batch: int, repeats: int) -> dict:
    """Both readers on one backbone: per-sample seconds and bytes, and the head's parameters."""
    from laya_cli.model.heads import build_head
    from laya_cli.model.settings import HeadSettings

    backbone = _backbone(name, side)
    x = torch.rand(batch, *backbone.probe_input(1).shape[1:], generator=torch.Generator().manual_seed(0))
    dims = backbone.dims(x)
    out: dict = {"case": name, "side": side, "batch": batch, "dims": dims}
    for reader in READERS:
        backbone.read_positions = reader == "positions"
        with torch.no_grad():
            feats = backbone(x)  # also the warm-up
            extract_s = _fastest_s(lambda: backbone(x), repeats)
        torch.manual_seed(0)
        head = build_head("laya", dims, 10, HeadSettings(alpha_reader=reader))
        step = _head_step(head, feats)
        step()  # warm-up
        row_bytes = sum(f.shape[-1] for f in feats) * 4
        out[reader] = {
            "extract_ms_per_sample": 1e3 * extract_s / batch,
            "cache_bytes_per_sample_fp32": row_bytes,
            "cache_bytes_per_sample_fp16": row_bytes // 2,
            "head_step_ms_per_sample": 1e3 * _fastest_s(step, repeats) / batch,
            "head_saved_bytes_per_sample": _saved_bytes(step) / batch,
            "head_parameters": sum(p.numel() for p in head.parameters()),
            "positions_per_layer": [(f.shape[-1] - d) // (d + 1) for f, d in zip(feats, dims)],
        }
    return out


def _laya(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "laya_cli", *args], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"laya {' '.join(args)} failed ({r.returncode}): {r.stdout[-400:]}{r.stderr[-400:]}")


def faithfulness(epochs: int, lr: float, samples: int, root: Path) -> list[dict]:
    """Each reader trained on the same frozen CNN against the network's effects, then audited at network scope."""
    rows = []
    for reader in READERS:
        ckpt, report = root / f"{reader}.pt", root / f"{reader}.json"
        common = ["--dataset", "digits", "--backbone", "cnn", "--frozen", "--epochs", str(epochs), "--lr", str(lr)]
        common.append("-q")
        _laya(
            "train", *common, "--align", "1", "--align-target", "network", "--alpha-reader", reader, "--out", str(ckpt)
        )
        _laya("audit", str(ckpt), "--scope", "network", "--compare", "atp", "--samples", str(samples), "--json",
              str(report), "-q")  # fmt: skip
        result = json.loads(report.read_text())
        methods = result["network"]["methods"] if "network" in result and result["network"] else result["methods"]
        ci = methods["laya"]["ci"]["faithfulness"]
        rows.append({
            "reader": reader,
            "accuracy": result["accuracy"],
            "alpha": methods["laya"]["faithfulness"],
            "atp": methods["atp"]["faithfulness"],
            "alpha_ci": [ci["ci_low"], ci["ci_high"]],
        })  # fmt: skip
    return rows


def _cost_table(results: list[dict]) -> Table:
    t = Table(title="positions reader ÷ pooled reader, per sample")
    for col in ("case", "positions/layer", "extract ms", "cache KiB fp32", "head step ms", "head saved KiB", "params"):
        t.add_column(col)
    for r in results:

        def pair(key, scale=1.0, fmt="{:.3g}", r=r):
            a, b = r["pooled"][key] * scale, r["positions"][key] * scale
            return f"{fmt.format(a)} → {fmt.format(b)} (×{b / a:.1f})" if a else f"{fmt.format(b)}"

        t.add_row(
            r["case"],
            ",".join(str(n) for n in r["positions"]["positions_per_layer"]),
            pair("extract_ms_per_sample"),
            pair("cache_bytes_per_sample_fp32", 1 / 1024),
            pair("head_step_ms_per_sample"),
            pair("head_saved_bytes_per_sample", 1 / 1024),
            pair("head_parameters", fmt="{:,.0f}"),
        )
    return t


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="cnn,timm:resnet18,timm:vit_tiny_patch16_224")
    p.add_argument("--side", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--faithfulness", action="store_true")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    console = Console(width=200)
    results = [cost(c, args.side, args.batch, args.repeats) for c in args.cases.split(",") if c]
    console.print(_cost_table(results))
    out: dict = {"cost": results, "torch_threads": torch.get_num_threads()}
    if args.faithfulness:
        with tempfile.TemporaryDirectory() as root:
            rows = faithfulness(args.epochs, args.lr, args.samples, Path(root))
        title = f"network scope, built-in CNN frozen on digits, {args.epochs} epochs, --align-target network, 1 seed"
        t = Table(title=title)
        for col in ("reader", "accuracy", "α faithfulness [95 % CI]", "AtP faithfulness"):
            t.add_column(col)
        for r in rows:
            ci = f"[{r['alpha_ci'][0]:.3f}, {r['alpha_ci'][1]:.3f}]"
            t.add_row(r["reader"], f"{r['accuracy']:.4f}", f"{r['alpha']:.3f} {ci}", f"{r['atp']:.3f}")
        console.print(t)
        out["faithfulness"] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
