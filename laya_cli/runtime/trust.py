"""Loading files that may come from strangers. Nothing here executes code from a file,
except ``load_trusted_pickle``, which only ``--trust-pickle`` reaches (docs/security.md)."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from .errors import LayaError


def _reason(e: Exception) -> str:
    text = str(e)
    if "Unsupported global" in text or "unsupported GLOBAL" in text:
        return "it holds pickled Python objects, which would run code when loaded; laya refuses"
    detail = (text.strip().splitlines() or [""])[0].split(". ")[0].strip()
    if (
        isinstance(e, (KeyError, IndexError))
        or not detail
        or "eights only" in detail
        or "weights_only" in detail
        or len(detail) > 120
    ):
        detail = "not a torch file" if "Unsupported operand" in text else type(e).__name__
    return f"it is corrupt or truncated ({detail})"


def safe_torch_load(path: str | Path, what: str):
    """``torch.load(weights_only=True)`` with every failure turned into a one-line LayaError."""
    path = Path(path).expanduser()
    if not path.exists():
        raise LayaError(f"{what} not found: {path}")
    if not path.is_file():
        raise LayaError(f"{what} is not a file: {path}")
    if path.stat().st_size == 0:
        raise LayaError(f"{what} {path} is empty (0 bytes)")
    try:
        with warnings.catch_warnings():  # garbage files make torch warn before it fails
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise LayaError(f"cannot read {what} {path}: {_reason(e)}") from None


def load_trusted_pickle(path: str | Path):
    """Full unpickling. Runs code from the file: callers must have --trust-pickle."""
    try:
        return torch.load(Path(path), map_location="cpu", weights_only=False)
    except Exception as e:
        raise LayaError(f"cannot unpickle {path}: {type(e).__name__}: {str(e)[:120]}") from None
