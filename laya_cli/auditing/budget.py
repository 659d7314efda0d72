"""Batch sizes from a memory budget (``--max-memory``), chosen before a job runs, so the job itself only
reads its settings; and the halving of those settings when CUDA runs out of memory anyway.

The estimate (docs/scaling.md, "The memory budget"): one forward of one sample, with a hook on every leaf
module summing the bytes of its outputs, gives the bytes one row costs in the backbone and in the head
(``RowCosts``). A pass with autograd keeps about those outputs and adds their gradients, hence
``GRAD_FACTOR`` (2). A batch of B samples, Integrated Gradients over R rows per pass (Captum's
``internal_batch_size``; ``B × steps`` without it) then costs about

    head scope     B × (features + head) × 2  +  R × (features + head) × 2  (+ B × backbone, streamed)
    network scope  B × taps  +  B × backbone × 2  +  R × (backbone + head) × 2

A user's ``--batch-size``/``--internal-batch-size`` is never changed: a warning says when it is over
budget. Otherwise IG's internal batch is lowered first (same numbers up to float rounding), then the
batch (the seeded ``random`` floor, drawn per batch, changes with it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..backbones.chain import eval_mode
from ..data.images import image_ranges
from ..features.extraction import StreamedFeatures, to_float_images
from ..runtime.declare import evolve
from ..runtime.device import to_device
from ..runtime.distributed import broadcast_object
from ..runtime.memory import MEMORY_KEYS, MemoryBudget, MiB
from .registry import having

GRAD_FACTOR = 2.0  # a pass with autograd: the kept module outputs plus their gradients


def _bytes(out) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, (tuple, list)):
        return sum(_bytes(o) for o in out)
    if isinstance(out, dict):  # a Hugging Face ModelOutput is one too (a NamedTuple such as HeadOutput a tuple)
        return sum(_bytes(o) for o in out.values())
    return 0  # anything else holds no tensor memory we count; an FX tracer's Proxy (torchvision) answers every
    # attribute with another Proxy, so looking further into it would never end


class _OutputBytes:
    """Sums the output bytes of every leaf module of ``module`` while in a ``with`` block."""

    def __init__(self, module: nn.Module):
        self.total = 0
        self._leaves = [m for m in module.modules() if next(m.children(), None) is None]
        self._handles = []

    def __enter__(self) -> _OutputBytes:
        self._handles = [m.register_forward_hook(self._add) for m in self._leaves]
        return self

    def _add(self, module, args, output) -> None:
        self.total += _bytes(output)

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()


@dataclass
class RowCosts:
    """Bytes of one sample: its features r_1..r_L, the head's module outputs, the backbone's module outputs,
    and its raw tap activations h_1..h_L."""

    features: int
    head: int
    backbone: int
    taps: int

    def to_dict(self) -> dict:
        return {k: round(v / 1024, 1) for k, v in vars(self).items()}  # KiB per row


@torch.no_grad()
def row_costs(model, images, device: str) -> RowCosts:
    """``RowCosts`` of ``model`` (a LayaModel) measured on the first of ``images``."""
    backbone, head = model.backbone, model.head
    x = to_float_images(to_device(next(iter(image_ranges(images, [(0, 1)]))), device))
    with eval_mode(backbone), _OutputBytes(backbone.model) as b:
        hs = backbone.activations(x)
    feats = [backbone.pool_tap(i, h).float() for i, h in enumerate(hs)]
    with eval_mode(head), _OutputBytes(head) as h:
        head(feats)
    return RowCosts(
        features=sum(f[0].numel() * 4 for f in feats), head=h.total, backbone=b.total, taps=sum(_bytes(t) for t in hs)
    )


def ig_rows(batch: int, steps: int, internal: int | None, network: bool) -> int:
    """Rows of one IG pass: ``internal`` at most (head scope splits the samples below it), ``batch × steps``
    at most, and never under one step of the whole batch at network scope (Captum's floor)."""
    rows = batch * steps if internal is None else min(internal, batch * steps)
    return max(batch * max(rows // batch, 1), batch) if network else max(rows, 1)


def audit_bytes(c: RowCosts, batch: int, rows: int, scope: str, streamed: bool) -> int:
    """The working set of one audited batch of ``batch`` samples with ``rows`` IG rows per pass (module doc)."""
    head_row = c.features + c.head
    head = batch * head_row * GRAD_FACTOR + rows * head_row * GRAD_FACTOR
    if streamed:
        head += min(batch, 256) * c.backbone
    net = batch * c.taps + batch * c.backbone * GRAD_FACTOR + rows * (c.backbone + c.head) * GRAD_FACTOR
    return int({"head": head, "network": net, "both": max(head, net)}[scope])


def _fitting_rows(c: RowCosts, batch: int, steps: int, scope: str, streamed: bool, work: int) -> int | None:
    """The internal batch that fits ``work`` (None: all ``batch × steps`` rows fit)."""
    network = scope != "head"
    if audit_bytes(c, batch, ig_rows(batch, steps, None, network), scope, streamed) <= work:
        return None
    per_row = max(c.features + c.head, c.backbone + c.head if network else 0) * GRAD_FACTOR
    fixed = audit_bytes(c, batch, 0, scope, streamed)
    rows = max(int((work - fixed) // max(per_row, 1)), 1)
    return max(rows // batch, 1) * batch if network else rows


@dataclass
class MemoryPlan:
    """What the budget decided: the budget, the estimate per row and for the run, and the notes."""

    budget: MemoryBudget
    costs: RowCosts | None
    estimate: int
    notes: list[str]
    settings: object = None  # the AuditSettings planned: a new object with the batch sizes that fit

    def to_dict(self, peak_mb: float, measure: str) -> dict:
        """The JSON's memory keys (``laya audit --json``: top level)."""
        budget, estimate = round(self.budget.total_mb, 1), round((self.budget.in_use + self.estimate) / MiB, 1)
        return dict(zip(MEMORY_KEYS, (budget, estimate, round(peak_mb, 1), measure)))


def plan_audit(
    model,
    data,
    methods: Sequence[str],
    settings,
    scope: str,
    budget: MemoryBudget,
    given: Collection[str] = (),
) -> MemoryPlan:
    """The plan whose ``settings`` are ``settings`` (AuditSettings) with the ``internal_batch_size`` and
    ``batch_size`` at which the audit of ``data`` (an EvalData) fits ``budget``, unless named in ``given`` (set by the
    user: then only a warning)."""
    c = row_costs(model, data.images, settings.device)
    streamed = isinstance(data.features, StreamedFeatures)
    return plan_from_costs(c, len(data.features), streamed, methods, settings, scope, budget, given)


def plan_from_costs(
    c: RowCosts,
    n: int,
    streamed: bool,
    methods: Sequence[str],
    settings,
    scope: str,
    budget: MemoryBudget,
    given: Collection[str] = (),
) -> MemoryPlan:
    """``plan_audit`` for ``n`` samples whose per-row costs are known (a language model's positions measure theirs
    in auditing/lm.py)."""
    network = scope != "head"
    steps = settings.steps if having("ig_rows", methods) else 0  # rows Captum's internal_batch_size bounds
    work, notes = budget.work, []

    def need(b: int, k: int | None) -> int:  # batches are never larger than the samples audited
        b = min(b, n)
        return audit_bytes(c, b, ig_rows(b, steps, k, network) if steps else 0, scope, streamed)

    b, k = settings.batch_size, settings.internal_batch_size
    if steps and "internal_batch_size" not in given:
        k = _fitting_rows(c, min(b, n), steps, scope, streamed, work)
    while need(b, k) > work and b > 1 and "batch_size" not in given:
        b = max(b // 2, 1)
        if steps and "internal_batch_size" not in given:
            k = _fitting_rows(c, min(b, n), steps, scope, streamed, work)
    if (b, k) != (settings.batch_size, settings.internal_batch_size):
        notes.append(
            f"memory budget {budget.describe()}: batch size {b}"
            + (f", IG internal batch {k} rows" if k is not None else "")
            + f" (estimated {need(b, k) / MiB:,.0f} MiB of working memory)"
        )
    if need(b, k) > work:
        notes.append(
            f"warning: the estimated working memory ({need(b, k) / MiB:,.1f} MiB) exceeds the {work / MiB:,.1f} MiB "
            f"the memory budget leaves, {budget.describe()}"
            + (f": lower {' or '.join(sorted('--' + g.replace('_', '-') for g in given))}" if given else "")
        )
    # Under torchrun every rank runs rank 0's plan: the batches must be the same everywhere (shards are whole
    # batches), and each rank's own free memory may differ a little.
    b, k, notes = broadcast_object((b, k, notes))
    planned = evolve(settings, batch_size=b, internal_batch_size=k)
    return MemoryPlan(budget, c, need(b, k), notes, planned)


class Halver:
    """The ``halve`` of ``runtime.memory.retry_halving`` for AuditSettings: IG's internal batch first (down to the
    batch), then the batch. A user's value is halved too (running beats failing), with the note. Each step makes
    new ``settings`` (the next attempt runs with them)."""

    def __init__(self, settings, steps: int):
        self.settings, self.steps = settings, steps

    def __call__(self) -> str | None:
        b, k = self.settings.batch_size, self.settings.internal_batch_size
        rows = b * self.steps if k is None else k
        if self.steps and rows > b:
            self.settings = evolve(self.settings, internal_batch_size=max(rows // 2, b))
            return f"IG internal batch {rows} -> {self.settings.internal_batch_size} rows"
        if b > 1:
            halved = {"batch_size": max(b // 2, 1)} | ({} if k is None else {"internal_batch_size": max(k // 2, 1)})
            self.settings = evolve(self.settings, **halved)
            return f"batch size {b} -> {self.settings.batch_size}"
        return None


def plan_rows(model, data, device: str, budget: MemoryBudget, most: int) -> tuple[int, RowCosts]:
    """Samples per head pass (at most ``most``) of a job without gradients (export, depth) within ``budget``."""
    c = row_costs(model, data.images, device)
    streamed = isinstance(data.features, StreamedFeatures)
    per = c.features + c.head + (c.backbone if streamed else 0)
    return broadcast_object(max(min(most, budget.work // max(per, 1)), 1)), c  # rank 0's, as plan_audit
