"""Frozen-backbone training with and without the feature cache, measured side by side.

    python -m benchmarks.train_cache [--images-per-class 30] [--epochs 20]

Three runs of 20 head epochs on a frozen timm:vit_tiny_patch16_224 (random weights; no
download) over a generated 3-class image folder:
  naive  the backbone runs on every batch of every epoch (what a plain loop does);
  cold   `laya train`: features extracted once, written to the cache, then 20 epochs;
  warm   `laya train` again: features read back from the cache, then 20 epochs.
Prints the wall times and the ratios naive/warm and cold/warm.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch


def run(images_per_class: int = 30, epochs: int = 20) -> dict:
    from laya_cli.data.datasets import load_dataset
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import EndToEnd
    from laya_cli.runtime import progress
    from laya_cli.training.job import prepare_backbone, train
    from laya_cli.training.loop import fit
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    from .synthetic import make_image_folder

    progress.set_enabled(False)  # a benchmark process of its own
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = make_image_folder(tmp / "shapes", per_class=images_per_class)
        os.environ["LAYA_CACHE_DIR"] = str(tmp / "cache")  # a fresh cache: "cold" really is cold
        cfg = TrainingSettings(epochs=epochs, patience=epochs, seed=0, batch_size=32)

        def request(out: str) -> TrainJobSettings:
            return TrainJobSettings(
                backbone="timm:vit_tiny_patch16_224",
                data=DataSettings(f"folder:{folder}", image_size=224, seed=0),
                train=cfg,
                out=str(tmp / out),
                pretrained=False,
            )  # random weights: no download

        # naive: same data, same head, but the frozen backbone runs every batch
        start = time.perf_counter()
        req = request("naive.pt")
        data = load_dataset(req.data)
        backbone = prepare_backbone(req, data)
        for p in backbone.parameters():
            p.requires_grad_(False)
        dims = backbone.dims(data.train.images[:1].float() / 255)
        head = build_head("laya", dims, len(data.classes))
        fit(
            EndToEnd(backbone, head),
            ([data.train.images], data.train.labels),
            ([data.val.images], data.val.labels),
            cfg,
        )
        naive = time.perf_counter() - start

        start = time.perf_counter()
        train(request("cold.pt"))
        cold = time.perf_counter() - start
        start = time.perf_counter()
        train(request("warm.pt"))
        warm = time.perf_counter() - start
    return {
        "images": 3 * images_per_class,
        "epochs": epochs,
        "naive_s": naive,
        "cold_s": cold,
        "warm_s": warm,
        "naive/warm": naive / warm,
        "cold/warm": cold / warm,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images-per-class", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args(argv)
    r = run(args.images_per_class, args.epochs)
    from .say import say

    say(
        f"frozen timm:vit_tiny_patch16_224, {r['images']} images, {r['epochs']} epochs, "
        f"{torch.get_num_threads()} threads"
    )
    say(f"  naive (backbone every epoch) {r['naive_s']:7.2f} s")
    say(f"  laya train, cold cache       {r['cold_s']:7.2f} s")
    say(f"  laya train, warm cache       {r['warm_s']:7.2f} s")
    say(f"  ratio naive / warm cache     {r['naive/warm']:7.1f}x   (target >= 10x)")
    say(f"  ratio cold  / warm cache     {r['cold/warm']:7.1f}x")
    return r


if __name__ == "__main__":
    main()
