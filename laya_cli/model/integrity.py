"""What a checkpoint's reader checks of its contents (docs/checkpoint.md, "Integrity"): the digest written with it,
and that its heads' weights are finite numbers.

``content_digest`` is a SHA-256 of every entry of the checkpoint but the digest itself: each tensor's dtype, shape
and bytes, every other value by its type and repr, dict entries in key order. ``save_checkpoint`` stores it as
``digest``; ``read_checkpoint`` recomputes it and refuses a file whose contents changed since (a flipped byte, a bad
copy, an edit) in one line naming the file. A file from before the digest was written loads with a note. A torch
checkpoint is a zip whose tensors are stored uncompressed and unchecked: without this, a flipped byte in a weight
is read as a different number and every command runs on it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..runtime.errors import LayaError
from ..runtime.progress import log

DIGEST_KEY = "digest"
ALGORITHM = "sha256"
_noted: set[str] = set()  # the files whose missing digest was already said (once per process)


def content_digest(ckpt: dict) -> str:
    """The SHA-256 (hex) of every entry of ``ckpt`` but its digest, tensors by their bytes."""
    h = hashlib.new(ALGORITHM)
    _feed(h, {k: v for k, v in ckpt.items() if k != DIGEST_KEY})
    return h.hexdigest()


def _feed(h, obj) -> None:
    """``obj`` into the hash, each value tagged with its type (and lengths), so no two contents read alike."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())  # the bytes as stored, without a copy
    elif isinstance(obj, dict):
        h.update(f"D{len(obj)}:".encode())
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)):
        h.update(f"{'L' if isinstance(obj, list) else 'U'}{len(obj)}:".encode())
        for item in obj:
            _feed(h, item)
    else:
        text = repr(obj).encode()
        h.update(f"V{type(obj).__name__}{len(text)}:".encode() + text)


def with_digest(ckpt: dict) -> dict:
    """``ckpt`` with the digest of its contents (any earlier digest replaced: a checkpoint read, changed and saved)."""
    body = {k: v for k, v in ckpt.items() if k != DIGEST_KEY}
    return {**body, DIGEST_KEY: {ALGORITHM: content_digest(body)}}


def check_digest(ckpt: dict, path: str | Path) -> None:
    """The checkpoint read from ``path`` is what was written: one ``LayaError`` line naming the file otherwise; a
    file without a digest (written before laya stored one) is read with a note."""
    recorded = ckpt.get(DIGEST_KEY)
    if recorded is None:
        if str(path) not in _noted:
            _noted.add(str(path))
            log(f"note: {path} carries no digest (written before laya stored one): its contents are not checked")
        return
    want = recorded.get(ALGORITHM) if isinstance(recorded, dict) else None
    if not isinstance(want, str):
        raise LayaError(f"{path} is corrupted: its digest entry is unreadable ({str(recorded)[:60]!r})")
    if content_digest(ckpt) != want:
        raise LayaError(
            f"{path} is corrupted: its contents do not match the digest written with it (a changed byte, a bad "
            f"copy or an edit); copy it again or retrain"
        )


def check_finite_weights(ckpt: dict, path: str | Path) -> None:
    """The heads' weights (the LAYA head's, a language model's tuned lens) are finite: a head of NaN or Inf (a
    diverged training, written by an older laya) would audit, export and pass gates as if it were a model. One
    pass over all of them (a pass per tensor costs a thread-pool round each: on a busy machine, most of the time)."""
    heads = {
        "head": (ckpt.get("head") or {}).get("weights"),
        "tuned lens": (ckpt.get("tuned_lens") or {}).get("weights"),
    }
    for what, weights in heads.items():
        floats = {k: t for k, t in (weights or {}).items() if isinstance(t, torch.Tensor) and t.is_floating_point()}
        if not floats or torch.isfinite(torch.cat([t.reshape(-1) for t in floats.values()])).all():
            continue
        name = next(k for k, t in floats.items() if not torch.isfinite(t).all())
        raise LayaError(
            f"{path}: the {what}'s weights hold NaN or Inf ({name}): its training diverged; train it again (with a "
            f"lower --lr)"
        )
