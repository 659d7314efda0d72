"""Where tensors live and at what precision the backbone runs: decided here, once.

``resolve_device`` turns ``--device auto|cpu|cuda|mps`` into a torch device string (under
torchrun, CUDA means this rank's GPU). Backbone passes on CUDA run under bf16 autocast unless
``LAYA_BF16=0``, read once per process (docs/scaling.md); features always come back float32.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
from torch import Tensor

from . import distributed
from .errors import LayaError, match_choice

DEVICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(device: str) -> str:
    """auto (CUDA if available, else CPU), cpu, cuda or mps; under torchrun cuda is this rank's GPU."""
    try:
        device = match_choice("--device", device, DEVICES)  # case-insensitive, the one rule
    except LayaError:
        raise LayaError(f"--device must be auto, cpu, cuda or mps, got '{device}'") from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise LayaError("--device cuda asked for, but no CUDA device is available")
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise LayaError("--device mps asked for, but Apple's MPS backend is not available on this machine")
        if distributed.active():
            raise LayaError("--device mps cannot run under torchrun (no MPS process-group backend); use --device cpu")
    if device == "cuda" and distributed.active():
        return f"cuda:{torch.cuda.current_device()}"  # init_from_env pinned this rank to GPU LOCAL_RANK
    return device


@functools.cache
def _bf16_allowed() -> bool:
    return os.environ.get("LAYA_BF16", "1") != "0"


def bf16_enabled(device) -> bool:
    """bf16 autocast for backbone passes: on bf16-capable CUDA devices, unless LAYA_BF16=0."""
    if not str(device).startswith("cuda") or not _bf16_allowed():
        return False
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def feature_precision(device) -> str | None:
    """What features computed on ``device`` must be keyed on besides the weights: 'bf16', or None (float32)."""
    return "bf16" if bf16_enabled(device) else None


def autocast(device):
    """The context backbone passes run in on ``device``."""
    if bf16_enabled(device):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_device(x: Tensor, device) -> Tensor:
    """Host-to-device copy; pinned and asynchronous on CUDA."""
    if str(device).startswith("cuda") and x.device.type == "cpu":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)
