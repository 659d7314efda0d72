"""How long a network-scope audit will take, said before it starts when that is more than a few minutes.

The network scope's work per sample, in forwards of the backbone to its last tap (its floor is the first two terms):
  1                          the taps (one pass)
  Σ_i s_i                    each layer removed, only the layers after it (s_i: the share of the pass after tap i,
                             taken as (L − 1 − i) / L: blocks of equal cost), or 1 each where the backbone cannot
                             continue from a tap
  3 per gradient method      Grad×Act, AtP, saliency: one forward and backward of the whole model each
  3·n·(s_i + 1/L) for IG     n steps of a forward and backward of layer i's suffix (n: the first steps, 16)
One probe batch of the audited images, as large as the audit's batches, times a forward; the estimate is that time per
sample × the passes × the samples. (A probe of 2 images overestimated ten-fold: a batch of 2 costs nearly what a batch
of 32 does, so the per-sample time of 2 is not the audit's: "about 9 min" for an audit done in 55 s, issue 71.) It is an
estimate (the steps IG refines to and the machine's load move it), printed to say what the audit will cost and how to
make it cheaper before the time is spent: the issue that asked for it saw a first line after 31 minutes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from .ig_steps import NETWORK_FIRST_STEPS
from .registry import METHODS

SAY_ABOVE_S = 180.0  # "more than a few minutes"
# What each cost class of method (``Method.cost``) adds per sample, in forwards to the last tap (module docstring):
# (the share of the pass after each tap, the layers, IG's first steps) -> forwards.
COST_PASSES = {
    "gradient": lambda suffix, n_layers, ig_steps: 3.0,
    "path": lambda suffix, n_layers, ig_steps: 3.0 * ig_steps * sum(s + 1.0 / n_layers for s in suffix),
}


def network_passes(methods: Sequence[str], n_layers: int, prefix: bool, ig_steps: int = NETWORK_FIRST_STEPS) -> float:
    """Forwards to the last tap per sample of a network-scope audit of ``methods`` (module docstring)."""
    suffix = [(n_layers - 1 - i) / n_layers if prefix else 1.0 for i in range(n_layers)]
    passes = 1.0 + sum(suffix)
    for cost, extra in COST_PASSES.items():
        count = sum(METHODS[m].cost == cost for m in methods)
        if count:
            passes += count * extra(suffix, n_layers, ig_steps)
    return passes


@torch.no_grad()
def seconds_per_forward(backbone, x: torch.Tensor) -> float:
    """Seconds of one forward to the last tap per sample, on ``x`` (a warm-up pass, then the best of two)."""
    backbone.activations(x)
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        backbone.activations(x)
        best = min(best, time.perf_counter() - started)
    return best / len(x)


def eta_line(seconds: float, n: int, passes: float, ig_passes: float) -> str | None:
    """The line said before a network-scope audit expected to take more than ``SAY_ABOVE_S`` (None below it): the
    estimate, what it is made of (``ig_passes`` of the ``passes`` per sample are IG's), and the options that make it
    cheaper."""
    if seconds <= SAY_ABOVE_S:
        return None
    cheaper = [f"--samples {max(1, int(n * SAY_ABOVE_S / seconds))} (about {SAY_ABOVE_S / 60:.0f} min)"]
    if ig_passes:
        cheaper.append(f"--compare gradxact,atp (network IG is the effect computed again: {ig_passes / passes:.0%} "
                       "of the work)")  # fmt: skip
    cheaper.append("--scope head (no pass through the network per layer)")
    return (f"note: this network-scope audit will take about {_duration(seconds)} ({n:,} samples × ~{passes:.0f} "
            f"forwards each); cheaper: {', '.join(cheaper)}")  # fmt: skip


def audit_eta(backbone, images, methods: Sequence[str], prefix: bool, batch_size: int = 32) -> str | None:
    """``eta_line`` for a network-scope audit of ``images`` in batches of ``batch_size``."""
    seconds, passes, ig = audit_seconds(backbone, images, methods, prefix, batch_size)
    return eta_line(seconds, len(images), passes, ig)


def audit_seconds(
    backbone, images, methods: Sequence[str], prefix: bool, batch_size: int
) -> tuple[float, float, float]:
    """(estimated seconds, forwards per sample, IG's share of them) of a network-scope audit of ``images``, timed on a
    probe of the audit's own batch size (the first ``batch_size`` images)."""
    from ..features.extraction import to_float_images
    from ..runtime.device import to_device

    x = to_float_images(to_device(images[: max(1, min(batch_size, len(images)))], backbone.adapter_device))
    n_layers = len(backbone.layer_names)
    passes = network_passes(methods, n_layers, prefix)
    ig = passes - network_passes([m for m in methods if METHODS[m].cost != "path"], n_layers, prefix)
    return seconds_per_forward(backbone, x) * passes * len(images), passes, ig


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"
