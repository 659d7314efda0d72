"""Where tensors live and at what precision the backbone runs: decided here, once.

``resolve_device`` turns ``--device auto|cpu|cuda|mps`` into a torch device string (under
torchrun, CUDA means this rank's GPU). Backbone passes on CUDA run under bf16 autocast unless
``LAYA_BF16=0`` (read once per process) or ``--precision fp32`` (docs/scaling.md); ``--precision bf16``
asks for it (CUDA only: refused elsewhere). Features always come back float32.
"""

from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar

import torch
from torch import Tensor

from . import distributed
from .declare import declared_setting, evolve
from .environment import DEVICES, PRECISIONS, env
from .errors import LayaError, match_choice

_PRECISION: ContextVar[str] = ContextVar("laya_precision", default="auto")


def resolved(settings, **changes):
    """A settings object ready to run, as a new one (``declare.evolve``): its ``device`` picked (auto: CUDA where
    available), a ``batch_size`` the command line left to the memory plan (None) at the declared default (the plan
    may lower it), then ``changes``. What every command and API function does to its settings before the job."""
    values = {"device": resolve_device(changes.pop("device", settings.device))}
    if getattr(settings, "batch_size", 0) is None:
        values["batch_size"] = declared_setting(type(settings), "batch_size").default
    return evolve(settings, **values, **changes)


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
    return env("LAYA_BF16", True)


def _bf16_capable() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def check_precision(precision: str, device) -> str:
    """``--precision`` on ``device``: auto, bf16 or fp32 (canonical spelling); bf16 needs a bf16-capable CUDA
    device (torch's CPU autocast is slower than float32 on most CPUs: refused rather than a silent no-op)."""
    p = match_choice("--precision", precision, PRECISIONS)
    if p == "bf16" and not (str(device).startswith("cuda") and _bf16_capable()):
        raise LayaError(
            f"--precision bf16 runs backbone passes under CUDA autocast and needs a bf16-capable CUDA device "
            f"(this run is on {device}); use --precision fp32 or auto"
        )
    return p


@contextlib.contextmanager
def precision(p: str):
    """Backbone passes in this block run at precision ``p`` (auto, bf16 or fp32; checked by check_precision)."""
    token = _PRECISION.set(p)
    try:
        yield
    finally:
        _PRECISION.reset(token)


def bf16_enabled(device) -> bool:
    """bf16 autocast for backbone passes: on bf16-capable CUDA devices, unless LAYA_BF16=0 or --precision fp32
    (``--precision bf16`` overrides LAYA_BF16=0)."""
    p = _PRECISION.get()
    if not str(device).startswith("cuda") or p == "fp32" or (p == "auto" and not _bf16_allowed()):
        return False
    return _bf16_capable()


def resolved_precision(device) -> str:
    """What backbone passes on ``device`` run at here: 'bf16' or 'fp32' (recorded in checkpoints and audits)."""
    return "bf16" if bf16_enabled(device) else "fp32"


def feature_precision(device) -> str | None:
    """What features computed on ``device`` must be keyed on besides the weights: 'bf16', or None (float32)."""
    return "bf16" if bf16_enabled(device) else None


def autocast(device):
    """The context backbone passes run in on ``device``."""
    if bf16_enabled(device):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_device(x: Tensor, device) -> Tensor:
    """Host-to-device copy; pinned and asynchronous on CUDA (a batch a pinned loader gave is not copied again)."""
    if str(device).startswith("cuda") and x.device.type == "cpu":
        return (x if x.is_pinned() else x.pin_memory()).to(device, non_blocking=True)
    return x.to(device)
