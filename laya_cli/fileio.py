"""Atomic file output: write to a temp file beside the target, then rename."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path

from .errors import LayaError


def check_writable(path: str | Path) -> Path:
    """Fail early (before hours of training) if ``path`` cannot be written."""
    path = Path(path).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise LayaError(f"cannot write {path}: it is a directory")
    if not parent.is_dir():
        raise LayaError(f"cannot write {path}: folder {parent} does not exist")
    try:  # the only reliable test (root ignores mode bits, read-only mounts don't)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise LayaError(f"cannot write {path}: folder {parent} is not writable ({e.strerror})") from None
    return path


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temp path; on success it replaces ``path`` in one rename, on failure it vanishes."""
    path = check_writable(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def json_safe(obj):
    """NaN and ±inf become None (JSON null), recursively: strict JSON for machines."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def strict_json(obj) -> str:
    return json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n"
