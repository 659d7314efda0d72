"""Data parallelism with PyTorch's own engine: every command runs unchanged under ``torchrun``.

    torchrun --nproc-per-node 4 -m laya_cli audit model.pt     (or: torchrun ... $(which laya) audit ...)

The CLI calls :func:`init_from_env` once. Under torchrun (``WORLD_SIZE`` > 1) it joins the
process group — ``gloo`` on CPU-only machines, ``cpu:gloo,cuda:nccl`` where CUDA is present
(CUDA tensors then travel over NCCL, CPU tensors over gloo) — and pins each process to the
GPU ``LOCAL_RANK``. Without torchrun every function here is a cheap no-op (rank 0 of 1), so
the library code calls them unconditionally.

How the work is split (docs/scaling.md):
- samples are sharded in **contiguous whole batches** (:func:`shard_bounds` with ``align`` =
  the batch size), so every sample is computed in exactly the batch it would be in with one
  process; results come back in the original order with :func:`gather_rows`;
- only rank 0 prints and writes files (:func:`is_main`), the others are muted by the CLI.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

_owned = False  # True when init_from_env created the process group (and cleanup should end it)


def _dist():
    """torch.distributed, or None. Not imported yet means no process group can exist: importing
    this module (and asking ``is_main()``) costs nothing outside torchrun."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() else None


def active() -> bool:
    """True inside an initialised process group with more than one process."""
    dist = _dist()
    return bool(dist and dist.is_initialized() and dist.get_world_size() > 1)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def env_world_size() -> int:
    """WORLD_SIZE as torchrun sets it (1 when not launched by torchrun)."""
    return _env_int("WORLD_SIZE", 1)


def dist_timeout() -> float:
    """``LAYA_DIST_TIMEOUT``: the seconds a collective waits (default 1800)."""
    from .environment import env

    return env("LAYA_DIST_TIMEOUT", 1800.0)


def default_backend() -> str:
    """``LAYA_DIST_BACKEND`` if set, else gloo (CPU) or gloo for CPU + NCCL for CUDA tensors."""
    import torch

    from .environment import env

    if env("LAYA_DIST_BACKEND"):
        return env("LAYA_DIST_BACKEND")
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def init_from_env(backend: str | None = None, timeout_s: float | None = None) -> bool:
    """Join torchrun's process group (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

    No-op (returns False) when not under torchrun or WORLD_SIZE is 1; idempotent.
    ``timeout_s`` (or ``LAYA_DIST_TIMEOUT``, seconds) bounds how long a collective waits.
    """
    global _owned
    import torch
    import torch.distributed as dist

    if not dist.is_available() or env_world_size() < 2:
        return False
    if dist.is_initialized():
        return True
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank() % max(torch.cuda.device_count(), 1))
    timeout_s = timeout_s or dist_timeout()
    try:
        dist.init_process_group(backend=backend or default_backend(), timeout=datetime.timedelta(seconds=timeout_s))
    except (ValueError, RuntimeError) as e:
        from .errors import LayaError

        raise LayaError(
            f"WORLD_SIZE={env_world_size()} but the process group could not start "
            f"({str(e).splitlines()[0][:160]}); launch with torchrun"
        ) from None
    _owned = True
    return True


def rank() -> int:
    return _dist().get_rank() if active() else 0


def world_size() -> int:
    return _dist().get_world_size() if active() else 1


def local_rank() -> int:
    return _env_int("LOCAL_RANK", 0)


def is_main() -> bool:
    """Rank 0 (or no torchrun): the one process that prints and writes files."""
    return rank() == 0


def barrier() -> None:
    if active():
        _dist().barrier()


def cleanup() -> None:
    """Leave the process group (only if init_from_env created it)."""
    global _owned
    dist = _dist()
    if _owned and dist is not None and dist.is_initialized():
        dist.destroy_process_group()
    _owned = False


def should_report_error(message: str, wait_s: float = 3.0) -> bool:
    """Whether this rank should print a user error (only rank 0 prints the common case).

    Rank 0 always does. Another rank prints only if rank 0 did not fail with the same message
    (it waits up to ``wait_s`` for rank 0's verdict in torchrun's key-value store, which works
    even while rank 0 is blocked in a collective), so an error seen by one rank only — a dataset
    missing on one node — is never silent, and a usage mistake is printed once.
    """
    if not active():
        return True
    try:
        store = _store()
        store.set(f"laya/error/{rank()}", message)
        if is_main():
            return True
        store.wait(["laya/error/0"], datetime.timedelta(seconds=wait_s))
        return store.get("laya/error/0").decode() != message
    except Exception:  # rank 0 did not fail in time (or no store): say it here
        return True


def _store():
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()


def mark_done() -> None:
    """Rank 0: the command has finished (outputs written, lines printed)."""
    if active() and is_main():
        try:
            _store().set("laya/done/0", "1")
        except Exception:
            pass


def wait_for_main(timeout_s: float | None = None) -> None:
    """Other ranks: before a failing exit, wait until rank 0 has finished the same command.

    torchrun stops every worker as soon as one exits non-zero, which could otherwise cut rank 0
    short while it still prints or writes (an audit that misses ``--fail-under`` still writes
    its JSON). Waits in torchrun's key-value store, not in a collective.
    """
    if not active() or is_main():
        return
    timeout_s = timeout_s or dist_timeout()
    try:
        _store().wait(["laya/done/0"], datetime.timedelta(seconds=timeout_s))
    except Exception:
        pass


# --------------------------------------------------------------------------- sharding


def shard_bounds(n: int, align: int = 1, rank_: int | None = None, world: int | None = None) -> tuple[int, int]:
    """[start, stop) of this rank's contiguous shard of range(n), in whole blocks of ``align`` rows.

    Blocks are dealt as evenly as possible (the first ``blocks % world`` ranks get one more);
    with more ranks than blocks the last ranks get an empty shard. ``align`` = the batch size
    keeps every batch identical to a one-process run (so are the numbers).
    """
    r = rank() if rank_ is None else rank_
    w = world_size() if world is None else world
    align = max(1, int(align))
    blocks = (n + align - 1) // align
    base, extra = divmod(blocks, w)
    first = r * base + min(r, extra)
    count = base + (1 if r < extra else 0)
    return min(first * align, n), min((first + count) * align, n)


def shard_indices(
    n: int, align: int = 1, strided: bool = False, rank_: int | None = None, world: int | None = None
) -> Tensor:
    """This rank's indices of range(n): contiguous whole blocks (default) or every world-th one."""
    import torch

    r = rank() if rank_ is None else rank_
    w = world_size() if world is None else world
    if strided:
        return torch.arange(r, n, w)
    start, stop = shard_bounds(n, align, r, w)
    return torch.arange(start, stop)


# --------------------------------------------------------------------------- gathering


def _gather_tensor(x: Tensor, n: int | None, dst: int | None, strided: bool) -> Tensor | None:
    import torch

    dist = _dist()
    w = dist.get_world_size()
    device, dtype = x.device, x.dtype
    # Collectives on the CPU (gloo): results are small per-sample rows or features kept on the CPU anyway.
    send = x.detach().cpu().contiguous()
    if dtype == torch.bool:
        send = send.to(torch.uint8)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(w)]
    dist.all_gather(sizes, torch.tensor([send.shape[0]], dtype=torch.int64))
    sizes = [int(s) for s in sizes]
    longest = max(sizes)
    if send.shape[0] < longest:  # all_gather needs equal shapes: pad the short shards
        pad = torch.zeros((longest - send.shape[0], *send.shape[1:]), dtype=send.dtype)
        send = torch.cat([send, pad])
    parts = [torch.empty_like(send) for _ in range(w)] if dst is None or dist.get_rank() == dst else None
    if dst is None:
        dist.all_gather(parts, send)
    else:
        dist.gather(send, parts, dst=dst)
        if parts is None:
            return None
    parts = [p[:s] for p, s in zip(parts, sizes)]
    total = sum(sizes)
    if n is not None and total != n:
        raise RuntimeError(f"gather_rows: the shards hold {total} rows, expected {n}")
    if strided:
        out = torch.empty((total, *send.shape[1:]), dtype=send.dtype)
        for r, p in enumerate(parts):
            out[r::w] = p
    else:
        out = torch.cat(parts)
    if dtype == torch.bool:
        out = out.bool()
    return out.to(device)


def gather_rows(x: Tensor | Sequence[Tensor], n: int | None = None, dst: int | None = None, strided: bool = False):
    """Reassemble sharded rows (dim 0) in the original order.

    ``x``: this rank's rows — a tensor, or a list/tuple of tensors (each gathered). Shards may
    be uneven (even empty); they are padded for ``all_gather``. ``n``: the expected total
    (checked). ``dst=None``: every rank gets the full result; ``dst=k``: only rank k does, the
    others get None. ``strided``: the shards came from ``shard_indices(..., strided=True)``.
    Without an active process group this returns ``x`` unchanged.
    """
    if not active():
        return x
    from torch import Tensor

    if isinstance(x, Tensor):
        return _gather_tensor(x, n, dst, strided)
    out = [_gather_tensor(t, n, dst, strided) for t in x]
    if dst is not None and rank() != dst:
        return None
    return type(x)(out) if isinstance(x, tuple) else out


def cat_rows(parts: Sequence[Tensor], dtype=None, width: int | None = None) -> Tensor:
    """This rank's per-batch rows as one tensor. An empty shard (no batches) is still a tensor of the
    right dtype and width (default float64), since it takes part in every gather."""
    import torch

    if parts:
        return torch.cat(list(parts))
    return torch.empty((0,) if width is None else (0, width), dtype=dtype or torch.float64)


def gathered_sum(parts: Sequence[Tensor], width: int) -> Tensor:
    """Per-batch sums (1, width) from every rank, added one by one in batch order: bit-identical to a
    one-process run (a float sum depends on its order)."""
    total = None
    for row in gather_rows(cat_rows(parts, width=width)):
        total = row if total is None else total + row
    return total


def all_true(flag: bool) -> bool:
    """True only if ``flag`` is true on every rank (e.g. 'my feature cache hit')."""
    if not active():
        return bool(flag)
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int64)
    _dist().all_reduce(t, op=_dist().ReduceOp.MIN)
    return bool(t.item())


def all_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum of small numbers over the ranks (float64)."""
    if not active():
        return [float(v) for v in values]
    import torch

    t = torch.tensor(list(values), dtype=torch.float64)
    _dist().all_reduce(t)
    return t.tolist()


def all_sum_(t: Tensor) -> Tensor:
    """``t`` summed over the ranks, in place (a rank with nothing to add passes zeros); returned."""
    if active():
        _dist().all_reduce(t)
    return t


def sum_gradients(params) -> None:
    """Every parameter's gradient summed over the ranks, in place: each rank's backward of its share of one global
    batch, scaled by the global count, adds up to the one-process gradient (a parameter no rank reached: zeros)."""
    if not active():
        return
    import torch

    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        _dist().all_reduce(p.grad)


def my_rows(x: Tensor) -> Tensor:
    """This rank's contiguous share of a batch's rows (all of them outside torchrun)."""
    lo, hi = shard_bounds(len(x))
    return x[lo:hi]


def broadcast_buffers(module, src: int = 0) -> None:
    """Copy rank ``src``'s buffers (e.g. BatchNorm running statistics) to every rank, in place."""
    if not active():
        return
    for b in module.buffers():
        _dist().broadcast(b.data, src=src)


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s ``obj`` on every rank (picklable objects; small)."""
    if not active():
        return obj
    box = [obj]
    _dist().broadcast_object_list(box, src=src)
    return box[0]
