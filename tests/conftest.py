"""Shared fixtures: a small trained digits checkpoint, generated image folders, isolated caches.

Helpers that tests call directly (``assert_user_error``, ``invoke``, ``run_laya``, the makers of
heads, folders and checkpoints) live in ``laya_cli.testing``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from laya_cli.runtime import progress
from laya_cli.testing import make_image_folder, train_digits

# Tests never touch the user's caches or the network.
os.environ.setdefault("LAYA_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "feature-cache"))
    monkeypatch.setenv("LAYA_DATA_DIR", str(tmp_path_factory.getbasetemp() / "no-data-here"))
    with progress.enabled(False):  # library calls stay quiet; commands set their own
        yield


@pytest.fixture(scope="session")
def digits_ckpt(tmp_path_factory) -> Path:
    """A LAYA head + paper MLP trained briefly on digits (test accuracy well above 0.9)."""
    return train_digits(tmp_path_factory.mktemp("ckpt") / "digits-laya.pt")


@pytest.fixture(scope="session")
def digits_ckpts(tmp_path_factory) -> dict[str, Path]:
    """One checkpoint per head kind."""
    root = tmp_path_factory.mktemp("heads")
    return {h: train_digits(root / f"{h}.pt", head=h, epochs=4) for h in ("laya", "last", "concat", "scalarmix")}


@pytest.fixture()
def image_folder(tmp_path) -> Path:
    return make_image_folder(tmp_path / "shapes")
