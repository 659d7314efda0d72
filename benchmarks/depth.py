"""Inference wall time of a full laya model next to the same model cut after tap K, in one run.

    python -m benchmarks.depth --model MODEL.pt@K [--model OTHER.pt@K ...]
                                   [--images 1024] [--batch 256] [--repeats 5] [--device auto] [--json FILE]
    python -m benchmarks.depth ...   (from a source checkout: the same, through a thin shim)

For each ``MODEL.pt@K`` the truncated checkpoint is written with ``laya depth MODEL.pt --truncate K``'s
own code (``depthing.analysis.truncate_model``, α masked above K and folded into a K-layer head) into a temp
folder, and both checkpoints are loaded back as a user would load them (``load_model``). Inference =
images → tapped backbone → head → predicted class, under ``torch.no_grad``, on the first ``--images``
test images of the checkpoint's dataset, in batches of ``--batch``.

Timing: one warm-up pass each, then ``--repeats`` rounds; each round runs every batch through the full
model and the truncated one in turn (alternating which goes first from round to round), so a change of
machine load hits both alike, and sums each model's batch times. Reported per image: the fastest round
(``timeit``'s rule) and the median round of each, the ratio full / truncated of the fastest rounds, and
the median over rounds of the per-round ratio. Also
the FLOPs ratio (``FlopCounterMode``) and the share of predictions that agree with the full model.
Without ``--model``: a paper MLP trained briefly on digits, cut at K = 2 (a smoke run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _time(fn, sync) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def measure(
    model_path: str,
    k: int,
    images: int = 1024,
    batch: int = 256,
    repeats: int = 5,
    device: str = "cpu",
    workdir: Path | None = None,
) -> dict:
    import torch

    from laya_cli.data.images import take
    from laya_cli.depthing.analysis import truncate_model
    from laya_cli.depthing.compute import model_flops, tap_flops
    from laya_cli.depthing.settings import DepthSettings
    from laya_cli.features.extraction import to_float_images
    from laya_cli.model.evaldata import load_eval_data
    from laya_cli.model.laya_model import load_model

    full = load_model(model_path).to(device)
    data = load_eval_data(full, samples=None, device=device)
    work = Path(workdir or tempfile.mkdtemp(prefix="laya-depth-bench-"))
    small_path = work / f"{Path(model_path).stem}-cut{k}.pt"
    truncate_model(full, data, DepthSettings(truncate=k, device=device), small_path)
    small = load_model(small_path).to(device).eval()
    full.eval()
    n = min(images, len(data.images))
    x = to_float_images(torch.as_tensor(take(data.images, slice(0, n)))).to(device)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)

    models = {"full": full, "truncated": small}

    def infer(m, xb):
        with torch.no_grad():
            return m.head(m.backbone(xb)).logits.argmax(-1)

    batches = [x[s : s + batch] for s in range(0, n, batch)]
    preds = {name: torch.cat([infer(m, xb) for xb in batches]) for name, m in models.items()}  # the warm-up pass
    times = {name: [] for name in models}
    for r in range(repeats):
        total = {name: 0.0 for name in models}
        order = list(models) if r % 2 == 0 else list(models)[::-1]
        for xb in batches:  # alternate batch by batch: a change of machine load hits both alike
            for name in order:
                total[name] += _time(lambda name=name, xb=xb: infer(models[name], xb), sync)
        for name in models:
            times[name].append(total[name])
    best = {name: min(t) / n for name, t in times.items()}
    median = {name: statistics.median(t) / n for name, t in times.items()}
    ratios = [f / t for f, t in zip(times["full"], times["truncated"])]
    one = x[:1]
    flops_full = model_flops(full.backbone, one)
    flops_small = tap_flops(full.backbone, one)[k - 1]
    return {
        "model": str(model_path),
        "k": k,
        "layer": full.layer_names[k - 1],
        "layers": full.num_layers,
        "images": n,
        "batch": batch,
        "repeats": repeats,
        "device": device,
        "seconds_per_image": best,
        "median_seconds_per_image": median,
        "ratio": best["full"] / best["truncated"],
        "median_ratio": statistics.median(ratios),
        "flops_full": flops_full,
        "flops_truncated": flops_small,
        "flops_ratio": flops_full / max(flops_small, 1),
        "agreement": float((preds["full"] == preds["truncated"]).float().mean()),
        "parameters": sum(p.numel() for p in small.backbone.model.parameters()),
        "parameters_full": sum(p.numel() for p in full.backbone.model.parameters()),
    }


def main(argv=None) -> list[dict]:
    from rich.console import Console

    from laya_cli.runtime.device import resolve_device
    from laya_cli.runtime.fileio import atomic_write_text, strict_json

    from .tables import depth_speed_table

    ap = argparse.ArgumentParser(prog="python -m benchmarks.depth", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="MODEL.pt@K",
        help="A checkpoint and the tap to cut it after (repeatable).",
    )
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    work = Path(tempfile.mkdtemp(prefix="laya-depth-bench-"))
    models = args.model
    if not models:
        from .synthetic import train_digits

        models = [f"{train_digits(work / 'digits-mlp.pt', epochs=4)}@2"]
    rows = []
    for spec in models:
        path, _, k = spec.rpartition("@")
        if not path or not k.isdigit():
            raise SystemExit(f"--model {spec}: expected MODEL.pt@K")
        rows.append(measure(path, int(k), args.images, args.batch, args.repeats, device, work))
    Console(width=160).print(depth_speed_table(rows))
    if args.json_out:
        atomic_write_text(args.json_out, strict_json(rows))
    return rows


if __name__ == "__main__":
    main()
