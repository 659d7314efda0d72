"""Past one machine's memory, measured by simulation: extraction and head training on WebDataset
shards of growing size, streamed vs in memory, with 1 and 2 torchrun ranks.

    python -m benchmarks.data_scale [--sizes 2000,10000,30000] [--ranks 1,2] [--epochs 3]
    python -m benchmarks.data_scale     (the same, from a source checkout)

Setup (not measured): procedurally drawn 32×32 PNG images (three learnable shapes on random
backgrounds) written as WebDataset tar shards of 1,000 samples (``.png`` + ``.cls``); size N uses
the first N / 1,000 shards.

Measured, each cell a fresh ``laya train`` job (a fresh cold cache, launched by torchrun with
``--nproc-per-node`` = ranks and ``OMP_NUM_THREADS=1`` per rank, torchrun's own default): the built-in ``cnn``
backbone, frozen, with a LAYA head, ``--dataset wds:…``, ``--epochs`` E (patience E):

  in-memory  ``LAYA_IN_MEMORY_MB`` large: images decoded into memory, features held in memory and
             written as single-file cache entries (laya's path for small data)
  streamed   ``LAYA_IN_MEMORY_MB=0``: images scanned, then decoded batch by batch; features in the
             sharded store (written by every rank); the head trained from the store through the
             shuffle buffer (DDP over the ranks' shards with 2 ranks)

Both use ``LAYA_SHARD_MB=1`` and ``LAYA_SHUFFLE_MB=2``: with this small backbone a feature row is
1.9 KB, so these scale the store's shards (~500 rows) and the shuffle buffer (~1,000 rows) down
to what a large data set with a large backbone meets at its defaults (64 MiB, 256 MiB).

Per cell: "extract" = the wall time from the job's start to its first training epoch (index the
shards, scan/decode the images, run the backbone, write the features; everything before
training), as images/s over the N images; "train" = the head epochs (with their validation
pass), as training rows × epochs / s; peak RSS = the largest of the ranks' own peak resident set
size (``memory.peak_rss_mb``), whole process. Printed side by side, with the ratios the issue
targets: streamed peak RSS at the largest size / at the smallest (≤ 1.2×) and streamed / in-memory
throughput at the smallest size (≥ 0.9×).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_SHARD = 1000
MODES = {"in-memory": {"LAYA_IN_MEMORY_MB": "1000000"}, "streamed": {"LAYA_IN_MEMORY_MB": "0"}}
SCALED = {"LAYA_SHARD_MB": "1", "LAYA_SHUFFLE_MB": "2"}


# --------------------------------------------------------------------------- data


def make_shards(folder: Path, n: int, size: int = 32, per_shard: int = PER_SHARD, seed: int = 0) -> Path:
    """Write n drawn images as WebDataset shards folder/000000.tar…; returns the folder."""
    import io
    import tarfile

    import numpy as np
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tar = None
    for i in range(n):
        if i % per_shard == 0:
            if tar is not None:
                tar.close()
            tar = tarfile.open(folder / f"{i // per_shard:06d}.tar", "w")
        c = int(rng.integers(0, 3))
        im = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 90, 3)))
        d = ImageDraw.Draw(im)
        x, y = (int(v) for v in rng.integers(2, size // 2, 2))
        s = int(rng.integers(size // 4, size // 2))
        colour = tuple(int(v) for v in rng.integers(150, 256, 3))
        if c == 0:
            d.ellipse([x, y, x + s, y + s], fill=colour)
        elif c == 1:
            d.rectangle([x, y, x + s, y + s], fill=colour)
        else:
            d.line([x, y, x + s, y + s], fill=colour, width=3)
            d.line([x, y + s, x + s, y], fill=colour, width=3)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        for ext, data in (("png", buf.getvalue()), ("cls", str(c).encode())):
            info = tarfile.TarInfo(f"{i:08d}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if tar is not None:
        tar.close()
    return folder


def pattern(folder: Path, n: int) -> str:
    last = (n + PER_SHARD - 1) // PER_SHARD - 1
    return f"{folder}/{{000000..{last:06d}}}.tar" if last else f"{folder}/000000.tar"


# --------------------------------------------------------------------------- one cell (every rank)


def worker(dataset: str, epochs: int, out: str, report: str) -> None:
    """``laya train`` on this rank (library call, as the command makes it); writes this rank's figures."""
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.settings import HeadSettings
    from laya_cli.runtime import distributed, progress
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    from .memory import peak_rss_mb

    start = time.perf_counter()
    distributed.init_from_env()
    progress.set_enabled(False)
    epochs_s, first = [], []

    def on_epoch(r):
        if not first:
            first.append(time.perf_counter() - r.seconds)  # when the first epoch started
        epochs_s.append(r.seconds)

    req = TrainJobSettings(
        backbone="cnn",
        finetune=False,
        head="laya",
        head_config=HeadSettings(),
        data=DataSettings(dataset, seed=0),
        train=TrainingSettings(epochs=epochs, patience=epochs, seed=0, batch_size=128),
        out=out,
    )
    ckpt = train(req, on_epoch)
    m = ckpt["metrics"]
    doc = {
        "rank": distributed.rank(),
        "world": distributed.world_size(),
        "extract_s": first[0] - start,
        "train_s": sum(epochs_s),
        "epochs": len(epochs_s),
        "n": m["n_train"] + m["n_val"] + m["n_test"],
        "n_train": m["n_train"],
        "test_accuracy": m["test_accuracy"],
        "peak_rss_mb": peak_rss_mb(),
        "total_s": time.perf_counter() - start,
    }
    Path(f"{report}.{distributed.rank()}").write_text(json.dumps(doc))
    distributed.cleanup()


def measure(dataset: str, mode: str, ranks: int, epochs: int, tmp: Path) -> dict:
    """One cell in fresh processes; the ranks' figures combined (max RSS and times, rank 0's counts)."""
    cell = Path(tempfile.mkdtemp(prefix=f"{mode}-{ranks}-", dir=tmp))
    env = {
        **os.environ,
        **SCALED,
        **MODES[mode],
        "LAYA_CACHE_DIR": str(cell / "cache"),
        "LAYA_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        "-m",
        "benchmarks.data_scale",
        "--worker",
        dataset,
        "--epochs",
        str(epochs),
        "--out",
        str(cell / "model.pt"),
        "--report",
        str(cell / "report"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"data_scale cell {mode} × {ranks} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    docs = [json.loads((cell / f"report.{k}").read_text()) for k in range(ranks)]
    out = dict(docs[0])
    for k in ("extract_s", "train_s", "peak_rss_mb", "total_s"):
        out[k] = max(d[k] for d in docs)
    out.update(
        mode=mode,
        ranks=ranks,
        rss_per_rank=[d["peak_rss_mb"] for d in docs],
        extract_ips=out["n"] / out["extract_s"],
        train_ips=out["n_train"] * out["epochs"] / out["train_s"] if out["train_s"] else float("nan"),
    )
    return out


def run(sizes, ranks, epochs: int = 3, keep: str | None = None, say=print) -> dict:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=keep) as tmp:
        tmp = Path(tmp)
        say(f"writing {max(sizes):,} images as WebDataset shards of {PER_SHARD:,} …")
        folder = make_shards(tmp / "shards", max(sizes))
        cells = []
        for n in sizes:
            for k in ranks:
                for mode in MODES:
                    c = measure(f"wds:{pattern(folder, n)}", mode, k, epochs, tmp)
                    c["size"] = n
                    cells.append(c)
                    say(
                        f"  {mode:<9} ranks {k}  {n:>7,} images  extract {c['extract_s']:6.1f} s  "
                        f"train {c['train_s']:6.1f} s  peak RSS {c['peak_rss_mb']:6.0f} MiB"
                    )
    return {
        "sizes": list(sizes),
        "ranks": list(ranks),
        "epochs": epochs,
        "cells": cells,
        "cpu_count": os.cpu_count(),
        "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "wall_s": time.perf_counter() - start,
        "settings": SCALED,
    }


def per_image_costs(device: str = "cpu", images: int = 16, batch: int = 16) -> dict:
    """What the ImageNet calculation of docs/scaling.md needs, measured here: seconds per image of
    (a) a ViT-B/16 extraction with its 12 block taps (laya's ``features.extraction.extract``, random weights: the same
    arithmetic as pretrained ones; bf16 autocast on CUDA) and (b) decoding + resizing one 500×375 JPEG to
    224×224 on one CPU core (``images.decode_image``), and the feature row size."""
    import io

    import numpy as np
    import torch
    from PIL import Image

    from laya_cli.backbones.build import BackboneSpec, build_backbone
    from laya_cli.data.images import decode_image
    from laya_cli.features.extraction import extract

    torch.manual_seed(0)
    backbone = build_backbone(BackboneSpec("vit_base", in_channels=3, image_size=(224, 224))).to(device).eval()
    x = torch.randint(0, 256, (images, 3, 224, 224), dtype=torch.uint8)
    extract(backbone, x[:batch], torch.zeros(batch), batch, device)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    feats = extract(backbone, x, torch.zeros(images), batch, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    vit = (time.perf_counter() - t) / images
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    jpeg, k = buf.getvalue(), 40
    t = time.perf_counter()
    for _ in range(k):
        decode_image(io.BytesIO(jpeg), 224)
    decode = (time.perf_counter() - t) / k
    return {
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "vit_b16_s_per_image": vit,
        "jpeg_decode_s_per_image": decode,
        "floats_per_image": sum(f.shape[1] for f in feats.feats),
        "layers": feats.num_layers,
        "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,10000,30000", help="comma list of data set sizes (images)")
    ap.add_argument("--ranks", default="1,2", help="comma list of torchrun process counts")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--json", dest="json_out", default=None, help="write every number to this file")
    ap.add_argument(
        "--per-image",
        action="store_true",
        help="only measure the per-image costs of the ImageNet calculation (ViT-B/16 extraction, JPEG decode)",
    )
    ap.add_argument("--device", default="cpu", help="--per-image: cpu or cuda")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--report", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.epochs, args.out, args.report)
        return {}
    if args.per_image:
        from .say import say

        r = per_image_costs(args.device)
        say(
            f"ViT-B/16, {r['layers']} taps ({r['floats_per_image']:,} floats per image), {r['device']}, "
            f"{r['torch_threads']} threads: {r['vit_b16_s_per_image'] * 1000:.1f} ms per image extracted; "
            f"JPEG 500×375 → 224×224 decode on one core: {r['jpeg_decode_s_per_image'] * 1000:.2f} ms per image"
            + (f" (load average {r['load_avg'][0]:.1f})" if r["load_avg"] else "")
        )
        return r
    from rich.console import Console

    from .say import say
    from .tables import data_scale_table

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    ranks = [int(s) for s in args.ranks.split(",") if s.strip()]
    result = run(sizes, ranks, args.epochs, say=say)
    Console(width=130).print(data_scale_table(result))
    if args.json_out:
        from laya_cli.runtime.fileio import atomic_write_text, strict_json

        atomic_write_text(args.json_out, strict_json(result))
    return result


if __name__ == "__main__":
    main()
