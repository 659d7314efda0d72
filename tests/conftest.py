"""Shared fixtures: a small trained digits checkpoint and generated image folders."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

# Tests never touch the user's caches or the network.
os.environ.setdefault("LAYA_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "feature-cache"))
    monkeypatch.setenv("LAYA_DATA_DIR", str(tmp_path_factory.getbasetemp() / "no-data-here"))


def assert_user_error(result, *fragments):
    """A CliRunner result that is exactly one 'error:' line, exit 2, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [l for l in result.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    text = " ".join(result.output.split())
    for f in fragments:
        assert f in text, text


def make_head_and_features(kind="laya", seed=0, batch=7, dims=(12, 8, 6, 10), num_classes=5):
    """A small seeded head with random layer features and an ablation reference."""
    from laya_cli.heads import HeadConfig, build_head

    torch.manual_seed(seed)
    head = build_head(kind, list(dims), num_classes, HeadConfig(d_star=8, score_hidden=16)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    feats = [torch.randn(batch, d, generator=g) for d in dims]
    ref = [torch.randn(d, generator=g) * 0.3 for d in dims]
    return head, feats, ref


def train_digits(out: Path, head: str = "laya", epochs: int = 8, seed: int = 0, patience: int | None = None,
                 d_star: int = 96, score_hidden: int = 192, **extra) -> Path:
    from laya_cli import progress
    from laya_cli.data import DataRequest
    from laya_cli.train import TrainConfig, TrainRequest, train

    progress.set_enabled(False)
    from laya_cli.heads import HeadConfig

    req = TrainRequest(head=head, data=DataRequest("digits", seed=seed),
                       head_config=HeadConfig(d_star=d_star, score_hidden=score_hidden),
                       train=TrainConfig(epochs=epochs, seed=seed, patience=patience or epochs), out=str(out), **extra)
    train(req)
    return out


@pytest.fixture(scope="session")
def digits_ckpt(tmp_path_factory) -> Path:
    """A LAYA head + paper MLP trained briefly on digits (test accuracy well above 0.9)."""
    return train_digits(tmp_path_factory.mktemp("ckpt") / "digits-laya.pt")


@pytest.fixture(scope="session")
def digits_ckpts(tmp_path_factory) -> dict[str, Path]:
    """One checkpoint per head kind."""
    root = tmp_path_factory.mktemp("heads")
    return {h: train_digits(root / f"{h}.pt", head=h, epochs=4) for h in ("laya", "last", "concat", "scalarmix")}


def make_image_folder(root: Path, classes=("circle", "square", "cross"), per_class: int = 12, size: int = 40,
                      seed: int = 0) -> Path:
    """Draw a small, learnable ImageFolder tree: one simple shape per class, random placement."""
    from PIL import Image, ImageDraw

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


@pytest.fixture()
def image_folder(tmp_path) -> Path:
    return make_image_folder(tmp_path / "shapes")
