"""Makers of small, real inputs for laya's tests and benchmarks, and ways to run the CLI.

Shipped with the package (no pytest import, no side effects on import), so that tests,
``laya_cli.speed`` and a user's own tests of a laya integration build the same things:
a generated image folder, a seeded head with features, a briefly trained digits checkpoint,
the command line run in-process (Typer's CliRunner) or as a real subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np


def make_image_folder(root: Path, classes: Sequence[str] = ("circle", "square", "cross"), per_class: int = 12,
                      size: int = 40, seed: int = 0) -> Path:
    """Draw a small, learnable ImageFolder tree: one simple shape per class, random placement."""
    from PIL import Image, ImageDraw

    root = Path(root)
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            im = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 60, 3)))
            d = ImageDraw.Draw(im)
            x, y = rng.integers(4, size // 2, 2)
            s = int(rng.integers(size // 4, size // 2))
            colour = (230, 200, 40)
            if c % 3 == 0:
                d.ellipse([x, y, x + s, y + s], fill=colour)
            elif c % 3 == 1:
                d.rectangle([x, y, x + s, y + s], fill=colour)
            else:
                d.line([x, y, x + s, y + s], fill=colour, width=3)
                d.line([x, y + s, x + s, y], fill=colour, width=3)
            im.save(root / name / f"{i:03d}.png")
    return root


def make_head_and_features(kind: str = "laya", seed: int = 0, batch: int = 7, dims=(12, 8, 6, 10),
                           num_classes: int = 5):
    """A small seeded head with random layer features and an ablation reference: (head, feats, ref)."""
    import torch

    from .config import HeadConfig
    from .heads import build_head

    torch.manual_seed(seed)
    head = build_head(kind, list(dims), num_classes, HeadConfig(d_star=8, score_hidden=16)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    feats = [torch.randn(batch, d, generator=g) for d in dims]
    ref = [torch.randn(d, generator=g) * 0.3 for d in dims]
    return head, feats, ref


def train_digits(out: Path, head: str = "laya", epochs: int = 8, seed: int = 0, patience: int | None = None,
                 d_star: int = 96, score_hidden: int = 192, **extra) -> Path:
    """Train the paper MLP + a head on scikit-learn's digits, quietly; returns the checkpoint path."""
    from . import progress
    from .config import DataRequest, HeadConfig, TrainConfig, TrainRequest
    from .train import train

    req = TrainRequest(head=head, data=DataRequest("digits", seed=seed),
                       head_config=HeadConfig(d_star=d_star, score_hidden=score_hidden),
                       train=TrainConfig(epochs=epochs, seed=seed, patience=patience or epochs), out=str(out), **extra)
    with progress.enabled(False):
        train(req)
    return Path(out)


def invoke(*args, **kwargs):
    """``laya ARGS…`` in this process (Typer's CliRunner); the result has exit_code, stdout, output."""
    from typer.testing import CliRunner

    from .cli import app

    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def run_laya(*args, cwd: str | Path | None = None, env: dict | None = None, timeout: float = 300):
    """``python -m laya_cli ARGS…`` as a real subprocess, offline; a CompletedProcess with text output."""
    env = {**os.environ, "LAYA_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "laya_cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def assert_user_error(result, *fragments: str) -> None:
    """A CliRunner result that is exactly one 'error:' line, exit 2, no traceback, naming ``fragments``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    text = " ".join(result.output.split())
    for fragment in fragments:
        assert fragment in text, text
