"""How long a network-scope audit will take, said before it starts when that is more than a few minutes.

What the estimate counts, per batch of the audit (``AuditCost``):
  the backbone's passes     forwards to its last tap per sample (``network_passes``; its floor is the first two terms)
                            × the seconds of one forward per sample, timed on a probe as large as the audit's batches:
                            once, cold (the warm-up in it: an upper bound), then warm (the best of two more) only
                            where the cold bound does not decide what follows (``_cold_forward_decides``)
  the batch's own work      everything else a batch does, whatever the backbone: the head's passes, Python around
                            each patched layer, the gradient methods' backward bookkeeping, ρ and Deletion@1 per
                            method. Measured, not modelled: the audit's real per-batch work (``network_batch``) runs
                            on its first batch, whole, where the backbone's passes alone are light (under
                            ``WHOLE_BATCH_BELOW_S``: its time is a batch's, passes and all) and the audit has more
                            than one batch (a probe of its only batch would do the audit twice; an audit of one
                            batch far under the line runs no probe at all, below), else on a probe of
                            ``PROBE_SAMPLES`` images, its time less their passes the cost a batch has beyond them
                            (a heavy backbone: the passes, counted, are most of it). The first run carries the
                            warm-up (imports, a first autograd or CUDA call) and is an upper bound; where that bound
                            leaves the audit under the line's threshold nothing is said and the bound is the
                            estimate, else the probe runs once more, warm, and that is what the line says.
  the intervals              after the batches, ``--bootstrap`` resamples of the per-sample rows per method: the same
                            computation timed on as many made-up rows with a tenth of the resamples, scaled up (on a
                            tiny backbone they are most of a network-scope audit: 0.12 of 0.19 CPU seconds on digits)
  estimate = the batches left × the batch's own work + samples × passes × the seconds of a forward (a heavy
             backbone's; a light one's are in its whole batch's time) + the intervals. The batches left: all of them,
             but for the whole first batch a light backbone's probe ran, which the audit keeps (below): the estimate
             is of the work still to come when the line is said.
Not counted: the head-scope audit ``--scope both`` runs first (head passes only), the machine's load changing on the
way; IG's refinements past its first steps move it too. The probes cost one forward of a batch (three where the warm
figure decides), one or two runs of the per-batch work (on a light backbone's whole first batch, a heavy one's 2
images; none for a one-batch audit far under the line) and a tenth of the bootstrap, before the work (the first run
also pays the warm-up the first batch would); a probe of the whole first batch is not paid twice: the audit takes
that batch's rows from it (``network.batches.probe_batch``).

What the estimate itself costs, and where it is not paid (issue 73). On a GPU each dispatched operation is a kernel
launch, and a 2-image batch costs nearly the launches of a 32-image one: for a one-batch audit (frozen vit_tiny, 32
images) the warm-up and best-of-two forwards and the 2-image probe were 3,591 of the audit's 5,823 operations, more
than the audit's own work, spent to say a line that is said only above 3 minutes. So:
  the forward               timed once, cold: an upper bound of a warm one. Where it decides (a multi-batch audit's
                            passes under ``WHOLE_BATCH_BELOW_S`` even so: its whole first batch is probed and that
                            time, passes and all, is the estimate; a one-batch audit far under the line, below),
                            no more forwards; else the best of two more, warm, decides and is what the line counts.
  a one-batch audit's probe  (2 images, thrown away) not run where the passes and the intervals stay under
                            ``FAR_UNDER`` (a third) of the line: a batch's own work beyond its passes would then have to
                            be 2/3 of the line (120 s) to carry the audit over it. Measured (``python -m
                            benchmarks.own_work``, docs/results/dispatch.md, "Fifth round"): the heaviest found,
                            network-scope IG on a 12-layer vit_tiny, dispatches 18,058 operations a 2-image probe,
                            its passes included: 0.9 s at 50 µs an operation (a GPU's launch and Python together),
                            18 s even at 1 ms; on the CPU here its time beyond the counted passes was 0–1.7 s (inside
                            the passes' noise), the default methods' 0–0.3 s, and a process's first probe, the
                            warm-up in it (imports, a first autograd call), 2.3 s at most. The margin is 50× that;
                            a batch of 256 rather than 2 adds the per-sample metrics (ρ, Deletion@1: vectorised), and
                            IG's own work grows with the layers and its refinements, so ten times the layers at twice
                            the steps stays under it too. Between a third of the line and the line the probe runs as
                            before (the audit may be near or over it), and a multi-batch light audit still probes its
                            whole first batch, which it keeps.

The passes per sample:
  1                          the taps (one pass)
  Σ_i s_i                    each layer removed, only the layers after it (s_i: the share of the pass after tap i,
                             taken as (L − 1 − i) / L: blocks of equal cost), or 1 each where the backbone cannot
                             continue from a tap
  3 per gradient method      Grad×Act, AtP, saliency: one forward and backward of the whole model each
  3·n·(s_i + 1/L) for IG     n steps of a forward and backward of layer i's suffix (n: the first steps, 16)
Issue 71 measured what a model of passes alone misses: on a tiny backbone the batch's own work is nearly all of it
(0.037 s estimated for an audit of 33.9 s), and a probe of 2 images for the forward overestimated ten-fold on a GPU
(a batch of 2 costs nearly what a batch of 32 does: "about 9 min" for an audit done in 55 s), hence the forward timed
at the audit's batch size and the per-batch work measured apart. ``python -m benchmarks.estimate`` prints the
estimate beside the measured time (docs/results/audit.md). The line is printed to say what the audit will cost and
how to make it cheaper before the time is spent: the issue that asked for it saw a first line after 31 minutes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np
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


PROBE_SAMPLES = 2  # a heavy backbone's probe of the per-batch work: its fixed cost, the samples' passes timed apart
WHOLE_BATCH_BELOW_S = 180.0  # the backbone's passes alone under this: a whole batch is probed, passes and all
FAR_UNDER = 1 / 3  # a one-batch audit whose passes and intervals stay under this share of the line is not probed
Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class AuditCost:
    """What a network-scope audit's estimate is made of (module docstring): each part counted or measured."""

    samples: int
    batches: int  # the audit's, the probed one among them (``batches_left``)
    passes: float  # forwards to the last tap per sample (``network_passes``)
    ig_passes: float  # IG's share of them
    forward: float  # seconds of one forward per sample, at the audit's batch size
    per_batch: float  # seconds of a batch's own work: beyond its passes, or with them (``whole_batch``); 0 unprobed
    intervals: float = 0.0  # seconds of the bootstrap intervals after the batches
    whole_batch: bool = False  # ``per_batch`` timed on a whole batch, its passes included (not counted again)

    @property
    def batches_left(self) -> int:
        """The batches still to run once the estimate is made: a whole first batch probed is the audit's own
        (``network.batches.probe_batch``), so it is not run, nor counted, again."""
        return self.batches - (1 if self.whole_batch else 0)

    @property
    def passes_seconds(self) -> float:
        """The backbone's passes alone: all the estimate was before issue 71."""
        return self.samples * self.passes * self.forward

    @property
    def seconds(self) -> float:
        return self.batches_left * self.per_batch + (0.0 if self.whole_batch else self.passes_seconds) + self.intervals


@torch.no_grad()
def seconds_per_forward(backbone, x: torch.Tensor, clock: Clock = time.perf_counter, runs: int = 1) -> float:
    """Seconds of one forward to the last tap per sample, on ``x``: the least of ``runs`` forwards. The audit's first
    forward carries the warm-up (a first call's lazy set-up, a GPU's first kernels) and is an upper bound of a warm
    one; after it, the best of two is the warm figure (``audit_cost`` takes it only where a decision depends on it)."""
    best = float("inf")
    for _ in range(runs):
        started = clock()
        backbone.activations(x)
        best = min(best, clock() - started)
    return best / len(x)


def per_batch_seconds(
    run_probe: Callable[[], object],
    passes_seconds: float,
    again: Callable[[float], bool] = lambda bound: True,
    clock: Clock = time.perf_counter,
) -> float:
    """Seconds a batch costs beyond its backbone passes: ``run_probe`` (the audit's per-batch work on a probe) once,
    which warms up (its time, less ``passes_seconds``, the probe's own passes counted apart, is an upper bound); then,
    if ``again(that bound)``, once more, timed warm."""
    started = clock()
    run_probe()
    bound = max(0.0, clock() - started - passes_seconds)
    if not again(bound):
        return bound
    return max(0.0, best_of(run_probe, clock) - passes_seconds)


def best_of(work: Callable[[], object], clock: Clock = time.perf_counter, budget: float = 0.2, most: int = 5) -> float:
    """Seconds of ``work``, warm: the least of its runs, run again while they total under ``budget`` seconds (at
    most ``most`` times), so a probe of a few milliseconds is not one preempted run on a busy machine."""
    best, spent, runs = float("inf"), 0.0, 0
    while runs < 1 or (runs < most and spent < budget):
        started = clock()
        work()
        took = clock() - started
        best, spent, runs = min(best, took), spent + took, runs + 1
    return best


INTERVALS_SHARE = 10  # the intervals' probe draws 1/10 of the resamples: their cost is linear in them


def intervals_seconds(methods: Sequence[str], n: int, settings, clock: Clock = time.perf_counter) -> float:
    """Seconds of the bootstrap intervals after the batches (``--ci``, ``--bootstrap`` resamples of the per-sample
    rows, paired across ``methods``): the same computation timed on ``n`` made-up rows with a tenth of the
    resamples, scaled up. 0 without intervals."""
    from ..stats.audit_columns import method_intervals

    level, n_boot = getattr(settings, "ci", 0.0), getattr(settings, "bootstrap", 0)
    if not level or not n_boot or n < 1:
        return 0.0
    rows = np.random.default_rng(0).random(n)
    columns = {m: {k: rows for k in ("faithfulness", "deletion@1", "oracle", "random")} for m in methods}
    share = max(1, n_boot // INTERVALS_SHARE)
    return best_of(lambda: method_intervals(columns, level, share, 0), clock) * n_boot / share


def eta_line(seconds: float, n: int, passes: float, ig_passes: float, per_batch: str = "") -> str | None:
    """The line said before a network-scope audit expected to take more than ``SAY_ABOVE_S`` (None below it): the
    estimate, what it is made of (``ig_passes`` of the ``passes`` per sample are IG's; ``per_batch``: the batches' own
    work, in words), and the options that make it cheaper."""
    if seconds <= SAY_ABOVE_S:
        return None
    cheaper = [f"--samples {max(1, int(n * SAY_ABOVE_S / seconds))} (about {SAY_ABOVE_S / 60:.0f} min)"]
    if ig_passes:
        cheaper.append(f"--compare gradxact,atp (network IG is the effect computed again: {ig_passes / passes:.0%} "
                       "of the work)")  # fmt: skip
    cheaper.append("--scope head (no pass through the network per layer)")
    made_of = f"{n:,} samples × ~{passes:.0f} forwards each" + (f" + {per_batch}" if per_batch else "")
    return (f"note: this network-scope audit will take about {_duration(seconds)} ({made_of}); cheaper: "
            f"{', '.join(cheaper)}")  # fmt: skip


def audit_eta(
    backbone, images, methods: Sequence[str], prefix: bool, settings, run_probe: Callable[[object], object]
) -> str | None:
    """``eta_line`` for a network-scope audit of ``images`` with ``settings`` (its batches, its intervals);
    ``run_probe(images)`` runs the audit's per-batch work on those images (``audit_cost``)."""
    batch_size = settings.batch_size
    cost = audit_cost(backbone, images, methods, prefix, batch_size, run_probe, settings=settings)
    return eta_line(cost.seconds, cost.samples, cost.passes, cost.ig_passes, _made_of(cost, batch_size))


def _made_of(cost: AuditCost, batch_size: int) -> str:
    """What the line adds to the passes it names: the batches' measured time (with their passes, where the whole
    first batch was timed, else beyond them; then only the batches left after it count) and the intervals."""
    per_batch = f"{cost.per_batch:.2g} s per batch of {batch_size:,}"
    if cost.whole_batch:
        left = f"{cost.batches_left:,} {'batch' if cost.batches_left == 1 else 'batches'} left"
        per_batch += f" × {left} (timed on the first, already done; passes included)"
    else:
        per_batch += " (of its own work beyond them)"
    parts = [per_batch] if cost.per_batch else []
    return " + ".join(parts + ([f"{cost.intervals:.0f} s of intervals"] if cost.intervals >= 1 else []))


def audit_cost(
    backbone,
    images,
    methods: Sequence[str],
    prefix: bool,
    batch_size: int,
    run_probe: Callable[[object], object],
    clock: Clock = time.perf_counter,
    say_above: float | None = None,
    settings=None,
) -> AuditCost:
    """The ``AuditCost`` of a network-scope audit of ``images`` in batches of ``batch_size``: the forward timed on a
    probe of the audit's own batch size (the first ``batch_size`` images) counts the passes (timed once, cold, and
    warm only where that bound does not decide: ``_cold_forward_decides``); the per-batch work
    (``run_probe(images)``) runs on that whole batch where the passes alone stay under ``WHOLE_BATCH_BELOW_S`` (a
    light backbone: the batch is cheap, and measuring it whole needs no model of its passes, which overcounts a CNN
    whose early blocks cost most), else on its first ``PROBE_SAMPLES`` (a heavy one: its passes counted, the probe
    adds the fixed cost); not at all for an audit of one batch whose passes and intervals stay under ``FAR_UNDER`` of
    the line (its ``per_batch`` 0: not measured, no line said). Timed warm only where it matters: where even its first
    run's time (the warm-up counted in every batch, an upper bound) leaves the audit under ``say_above`` (default
    ``SAY_ABOVE_S``), no line is said and that bound is the estimate. ``settings``: the audit's (its intervals,
    ``intervals_seconds``; None: none)."""
    from ..data.images import image_batches
    from ..features.extraction import to_float_images
    from ..runtime.device import to_device

    n, n_layers = len(images), len(backbone.layer_names)
    first = next(image_batches(images, max(1, min(batch_size, n)), 0))
    x = to_float_images(to_device(first, backbone.adapter_device))
    forward = seconds_per_forward(backbone, x, clock)  # cold: an upper bound of a warm forward
    passes = network_passes(methods, n_layers, prefix)
    ig = passes - network_passes([m for m in methods if METHODS[m].cost != "path"], n_layers, prefix)
    intervals = intervals_seconds(methods, n, settings, clock)
    cost = AuditCost(n, -(-n // max(1, batch_size)), passes, ig, forward, 0.0, intervals)
    say_above = SAY_ABOVE_S if say_above is None else say_above
    if not _cold_forward_decides(cost, say_above):
        cost = dataclasses.replace(cost, forward=seconds_per_forward(backbone, x, clock, runs=2))  # warm
    if cost.batches == 1 and _far_under(cost, say_above):
        return cost  # no probe: its own work would have to be most of the line (``FAR_UNDER``)
    # a light backbone's whole first batch, unless it is the audit's only one (the probe would do the audit twice)
    cost = dataclasses.replace(cost, whole_batch=cost.passes_seconds <= WHOLE_BATCH_BELOW_S and cost.batches > 1)
    probe = first if cost.whole_batch else first[: min(PROBE_SAMPLES, len(first))]

    def worth_timing(bound: float) -> bool:
        return dataclasses.replace(cost, per_batch=bound).seconds > say_above

    probe_passes = 0.0 if cost.whole_batch else passes * cost.forward * len(probe)
    per_batch = per_batch_seconds(lambda: run_probe(probe), probe_passes, worth_timing, clock)
    return dataclasses.replace(cost, per_batch=per_batch)


def _far_under(cost: AuditCost, say_above: float) -> bool:
    """A one-batch audit's passes and intervals under ``FAR_UNDER`` of the line: not probed (module docstring)."""
    return cost.passes_seconds + cost.intervals < FAR_UNDER * say_above


def _cold_forward_decides(cost: AuditCost, say_above: float) -> bool:
    """Whether the forward timed cold (``cost.forward``, an upper bound of a warm one) decides what follows, so that
    no more forwards are timed: with more than one batch, a whole first batch is probed where even that bound keeps
    the passes under ``WHOLE_BATCH_BELOW_S`` (the estimate is then the batch's time, passes and all); with one, no
    probe runs where it leaves the audit far under the line. Else the warm figure decides, and is counted."""
    if cost.batches > 1:
        return cost.passes_seconds <= WHOLE_BATCH_BELOW_S
    return _far_under(cost, say_above)


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"
