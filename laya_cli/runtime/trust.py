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


MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"PAR1", "a Parquet file"),
    (b"\x93NUMPY", "a NumPy array"),
)


def looks_like(path: Path) -> str | None:
    """What a file that torch cannot read looks like (``a PNG image``, ``CSV text``…), from its first bytes; None
    for what torch writes (a zip archive or a pickle: then it is a damaged torch file)."""
    head = path.open("rb").read(512)
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        return None
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) > 9 and head[8:10] == b'{"':  # an 8-byte header length, then the JSON header
        return "a safetensors file of weights (laya train --weights takes it)"
    try:
        text = head.decode("utf-8").lstrip("\ufeff \t\r\n")
    except UnicodeDecodeError:
        return "corrupt or foreign binary data (of no format laya knows)"
    first = text.splitlines()[0] if text else ""
    if text[:1] in "{[":
        return "JSON text"
    if text[:1] == "<":
        return "HTML or XML text"
    return "CSV text" if "," in first or "\t" in first else "plain text"


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
        if (kind := looks_like(path)) is not None:
            raise LayaError(f"{path} is not a {what}: it looks like {kind}") from None
        raise LayaError(f"cannot read {what} {path}: {_reason(e)}") from None


def load_trusted_pickle(path: str | Path):
    """Full unpickling. Runs code from the file: callers must have --trust-pickle."""
    try:
        return torch.load(Path(path), map_location="cpu", weights_only=False)
    except Exception as e:
        raise LayaError(f"cannot unpickle {path}: {type(e).__name__}: {str(e)[:120]}") from None
