"""Memory: what this process holds (RSS on the CPU, tensors on CUDA), the budget of ``--max-memory``, and the
one rule for running out of CUDA memory (halve the batch and retry).

The budget is the most memory the process may hold while a job runs: on the CPU its resident set size
(RSS), on CUDA the bytes torch has allocated on the device. ``--max-memory`` takes

- a size: ``2G``, ``2GB``, ``1.5GiB``, ``512M``, ``800MB``, ``65536K`` or plain bytes (powers of 1024), or
- a fraction of the memory free when the job starts (a number in (0, 1], e.g. ``0.5``): what the process
  already holds plus that share of /proc/meminfo's ``MemAvailable`` (CPU) or ``torch.cuda.mem_get_info``'s
  free bytes (CUDA).

Without it the budget is ``DEFAULT_FRACTION`` (0.5) of the free memory. A job plans its batch sizes so
that the memory it holds plus its estimated working set fits (``auditing.budget``); the estimate is an
estimate, so the budget is a target, not a hard limit: the peak is measured and reported beside it.

Linux: ``VmRSS`` and ``VmHWM`` from /proc/self/status, the process's own memory. (``ru_maxrss`` is not used
there: it survives fork + exec, so a child started by a big parent would report the parent's size.)
Elsewhere: ``getrusage(RUSAGE_SELF).ru_maxrss`` (macOS reports bytes). No torch at import.
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import LayaError

MiB = 1024 * 1024
DEFAULT_FRACTION = 0.5  # of the free memory, without --max-memory
# The keys a job's JSON gets from its budget: measurements of this run, like its wall time, not results (a
# comparison of two runs' results leaves them out: they differ between runs and between torchrun ranks).
MEMORY_KEYS = ("memory_budget_mb", "memory_estimate_mb", "peak_memory_mb", "peak_memory_measure")
_UNITS = {"": 1, "b": 1, "k": 1024, "m": MiB, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)

T = TypeVar("T")

# --------------------------------------------------------------------------- this process's memory


def proc_status_mb(field: str) -> float | None:
    """A ``kB`` field of /proc/self/status in MiB; None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def peak_rss_mb() -> float:
    """This process's peak resident set size, MiB."""
    hwm = proc_status_mb("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def rss_mb() -> float:
    """Resident set size now (MiB); the peak so far where the current value is not available."""
    now = proc_status_mb("VmRSS")
    return now if now is not None else peak_rss_mb()


def reset_peak() -> float | None:
    """Reset this process's peak RSS to its current RSS (Linux ≥ 4.0: ``echo 5 > /proc/self/clear_refs``)
    and return that RSS (MiB), so a later peak measures one phase alone; None where unsupported."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return proc_status_mb("VmRSS")


def _cuda(device) -> bool:
    return str(device).startswith("cuda")


def available_bytes(device="cpu") -> int:
    """Free memory: the device's free bytes on CUDA, else /proc/meminfo's MemAvailable (or, without /proc,
    what ``os.sysconf`` says is free)."""
    if _cuda(device):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def in_use_bytes(device="cpu") -> int:
    """What the process holds now: torch's allocated device bytes on CUDA, else the RSS."""
    if _cuda(device):
        import torch

        return int(torch.cuda.memory_allocated(torch.device(device)))
    return int(rss_mb() * MiB)


def reset_peak_memory(device="cpu") -> None:
    """Start measuring the peak afresh on CUDA (``peak_memory_mb``); the CPU's RSS peak is the process's own."""
    if _cuda(device):
        import torch

        torch.cuda.reset_peak_memory_stats(torch.device(device))


def peak_memory_mb(device="cpu") -> float:
    """The peak the budget bounds: ``torch.cuda.max_memory_allocated`` on CUDA, else the process's peak RSS."""
    if _cuda(device):
        import torch

        return torch.cuda.max_memory_allocated(torch.device(device)) / MiB
    return peak_rss_mb()


def peak_measure(device="cpu") -> str:
    """What ``peak_memory_mb`` measured, in words (recorded beside it)."""
    return "torch.cuda.max_memory_allocated" if _cuda(device) else "process peak RSS"


# --------------------------------------------------------------------------- the budget


def parse_max_memory(text: str) -> tuple[str, float]:
    """``("bytes", n)`` for a size, ``("fraction", f)`` for a number in (0, 1]; a LayaError otherwise."""
    s = str(text).strip()
    try:
        f = float(s)
    except ValueError:
        f = None
    if f is not None and f <= 1:  # a plain number up to 1: a share of the free memory
        if not f > 0:
            raise LayaError(f"--max-memory: a fraction of the free memory must be in (0, 1], got {text}")
        return "fraction", f
    m = _SIZE.match(s)
    if m is None:
        raise LayaError(
            f"--max-memory must be a size (2G, 512M, 1.5GiB, bytes) or a fraction of the free memory (0.5), "
            f"got '{text}'"
        )
    n = float(m["n"]) * _UNITS[m["unit"].lower()]
    if n < MiB:
        raise LayaError(f"--max-memory must be at least 1M, got '{text}'")
    return "bytes", n


@dataclass
class MemoryBudget:
    """The memory a job may hold (``total``), what it held when its plan was made (``in_use``), in bytes."""

    total: int
    in_use: int
    device: str = "cpu"
    asked: str | None = None  # --max-memory as given (None: the default fraction)

    @property
    def work(self) -> int:
        """Bytes left for the job's working set (batches, IG rows)."""
        return max(self.total - self.in_use, 0)

    @property
    def total_mb(self) -> float:
        return self.total / MiB

    def describe(self) -> str:
        how = f"--max-memory {self.asked}" if self.asked else f"default: {DEFAULT_FRACTION:g} of the free memory"
        where = "CUDA memory" if _cuda(self.device) else "RSS"
        return f"{self.total_mb:,.0f} MiB of {where} ({how}; {self.in_use / MiB:,.0f} MiB in use when planned)"


def check_max_memory(text: str | None) -> str | None:
    """Validate ``--max-memory`` before any work (its value stays the string the user gave)."""
    if text is not None:
        parse_max_memory(text)
    return text


def memory_budget(max_memory: str | None = None, device="cpu") -> MemoryBudget:
    """The budget of ``--max-memory`` (None: ``DEFAULT_FRACTION`` of the free memory) on ``device``, now."""
    kind, value = parse_max_memory(max_memory) if max_memory is not None else ("fraction", DEFAULT_FRACTION)
    used = in_use_bytes(device)
    total = int(value) if kind == "bytes" else used + int(value * available_bytes(device))
    return MemoryBudget(total=total, in_use=used, device=str(device), asked=max_memory)


# --------------------------------------------------------------------------- out of memory


def is_oom(exc: BaseException) -> bool:
    """Torch ran out of device memory (``torch.OutOfMemoryError``, CUDA's included)."""
    import torch

    return isinstance(exc, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError))


def free_cached(device="cpu") -> None:
    """Give the allocator's cached blocks back after an OOM, so the retry starts clean."""
    gc.collect()
    if _cuda(device):
        import torch

        torch.cuda.empty_cache()


def retry_halving(run: Callable[[], T], halve: Callable[[], str | None], device="cpu") -> tuple[T, list[str]]:
    """``run()``; on an out-of-memory error ``halve()`` (which shrinks the batch settings ``run`` reads and
    says how, or returns None when nothing is left to halve) and run again. Returns the result and one note
    per retry. Any other error, or an OOM with nothing left to halve, propagates."""
    notes: list[str] = []
    while True:
        try:
            return run(), notes
        except Exception as e:
            if not is_oom(e):
                raise
            how = halve()
            if how is None:
                raise LayaError(
                    "out of memory even with batches of one sample: free device memory, or use a smaller model"
                ) from e
            free_cached(device)
            notes.append(f"out of memory ({type(e).__name__}): {how} and retried")


@dataclass
class MemoryRequest:
    """What a command asks of the memory planner: ``--max-memory`` (None: the default fraction) and the
    batch settings the user gave (never overridden by the plan)."""

    max_memory: str | None = None
    given: frozenset[str] = frozenset()

    def __post_init__(self):
        check_max_memory(self.max_memory)
        self.given = frozenset(self.given)
