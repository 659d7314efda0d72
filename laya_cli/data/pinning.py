"""A result pinned to its data (docs/datasets.md, "Where a checkpoint's data is"): the data set's name with a local path
resolved (``folder:../fashion`` -> ``folder:/abs/fashion``), so a command run from another working directory reads
the same folder, and a fingerprint of the evaluation (test) split, so one that finds other data there stops with one
line instead of auditing it silently.

The fingerprint is SHA-256 over the split's size, labels and contents: the bytes of its images as decoded or of its
tokens, the same whether the images were decoded into memory or are streamed from their source (the same files copied
elsewhere, or read another way, are the same data); a text split's strings where it has them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..runtime.errors import LayaError


def resolved_name(name: str) -> str:
    """``PREFIX:PATH`` with PATH made absolute where it names something on this machine; any other name as it is
    (a registered data set, a hub name)."""
    prefix, colon, path = name.partition(":")
    if not colon or not path or not Path(path).expanduser().exists():
        return name
    return f"{prefix}:{Path(path).expanduser().resolve()}"


FINGERPRINT_BATCH = 256  # images decoded at a time to fingerprint a streamed split


def _content(h, images) -> None:
    """Feed the images of a split into ``h``: their bytes, the same whether they were decoded into memory (a tensor)
    or are decoded as used (``LazyImages`` of a source, past ``LAYA_IN_MEMORY_MB``: decoded here batch by batch), so
    that the fingerprint depends on the data, not on how it was read."""
    if isinstance(images, torch.Tensor):
        h.update(images.detach().cpu().contiguous().numpy().tobytes())
        return
    batches = getattr(images, "batches", None)
    if batches is None:
        h.update(repr(images).encode())
        return
    for batch in batches(FINGERPRINT_BATCH):
        h.update(batch.detach().cpu().contiguous().numpy().tobytes())


def split_fingerprint(split) -> str | None:
    """The SHA-256 of an evaluation split: ``sha256:`` + 16 hex digits + ``@`` + the shape its inputs were read at
    (in-memory images decoded at another size cannot be compared byte for byte: ``check_same_data`` skips them); None
    without a split."""
    if split is None:
        return None
    h = hashlib.sha256()
    labels = split.labels.detach().cpu().long()
    h.update(f"{len(labels)}:".encode() + labels.numpy().tobytes())
    texts = getattr(split, "texts", None)
    if texts is not None:
        for t in texts:
            h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    else:
        _content(h, split.images)
    shape = "x".join(str(d) for d in tuple(getattr(split.images, "shape", ()))[1:]) if texts is None else "text"
    return f"sha256:{h.hexdigest()[:16]}@{shape}"


def check_same_data(recorded: str | None, found: str | None, where: str) -> None:
    """Stop with one line when the data found at ``where`` is not the data the checkpoint recorded (either unknown:
    nothing to compare, e.g. a checkpoint from before the record)."""
    if recorded and found and recorded != found and recorded.partition("@")[2] == found.partition("@")[2]:
        raise LayaError(
            f"the data at {where} is not the data this checkpoint was evaluated on (its test split's fingerprint "
            f"{found} differs from the recorded {recorded}): restore that data, or pass --dataset to audit other data "
            "on purpose"
        )


def pinned(name: str, data_dir: str | None, test_split) -> dict:
    """What a checkpoint's ``dataset`` adds to pin its data: ``resolved`` (the name with its path absolute),
    ``data_dir_resolved`` and ``fingerprint`` (of the test split; None without one)."""
    resolved_dir = str(Path(data_dir).expanduser().resolve()) if data_dir else None
    return {
        "resolved": resolved_name(name),
        "data_dir_resolved": resolved_dir,
        "fingerprint": split_fingerprint(test_split),
    }
