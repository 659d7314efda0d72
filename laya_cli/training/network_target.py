"""The network alignment target (``align_target="network"``): ``--align λ`` ranks α as the layers' network-scope
effects instead of the head's own.

    loss = cross_entropy + λ · ranking_loss(log α(x), Δᴺ(x))
    Δᴺ_i(x) = p_ŷ(x) − p_ŷ(x with block i removed inside the backbone, the later blocks run on)

Δᴺ is what ``laya audit --scope network`` ranks every method against, computed by the audit's own code
(``auditing.network.patching.NetworkScope``: its fill, its continuation from a tap, its pooling;
``removal_effects``), under ``removal``: by default (``auto``) ``bypass`` where every tapped block's output has its
input's shape (residual blocks: a transformer's layers), else ``mean`` (the built-in mlp and cnn change width). ŷ
is the head's prediction.

- Frozen backbone: the taps cannot move, so the pooled taps with each block removed are computed **once** (one
  backbone pass and, per block, the blocks after it) and kept beside the features, for a seeded ``FROZEN_SUBSET /
  batch_size`` share of the training split (``cached_rows``): a shuffled batch then holds about ``FROZEN_SUBSET``
  of them, and the term costs L + 1 head passes (``removal_effects``) on those rows only. The cache costs about
  L/2 feature extractions of that share, not of the whole split (texts in length order, each batch cut to its own
  longest text, as the extraction runs them: ``frozen_removals``). ``mean`` removes by the training mean of the
  raw activations (``tap_means``, what the audit computes for a frozen backbone). Features in a sharded store
  work alike: the store's batches carry their rows (``StoredFeatures.epoch_batches(with_rows=True)``, under
  torchrun each rank's), and the cached rows' inputs are read batch by batch (streamed images too). The cache is
  held in memory within ``LAYA_IN_MEMORY_MB`` (its default where that is 0): past it, fewer rows
  (``cached_rows(limit=...)``), in one line.
- End to end: the backbone moves, so Δᴺ is computed anew on the first ``subset`` rows of every ``every``-th batch
  (the batches are shuffled), with the backbone in eval mode as the audit runs it; ``mean`` removes by a running
  mean of those rows' raw activations.

The ranking term (or ``--align-loss``'s distillation) and its scope (``--align-scope``) are ``alignment.py``'s; only
the target changes. ``align_target="both"`` adds the head's own term (``head_term``: ``alignment.Alignment``) on
every batch, λ each: α then ranks the layers as the network needs them and as the head reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..auditing.network.patching import NetworkScope, removal_effects
from ..auditing.settings import BY_INPUT
from ..data.images import image_batches, take
from ..features.extraction import length_order, tap_means, tap_outputs, tap_updates, to_float_images
from ..runtime import distributed
from ..runtime.device import to_device
from ..runtime.environment import IN_MEMORY_MB, in_memory_budget_mb
from ..runtime.errors import LayaError
from ..runtime.progress import log, track
from .alignment import EMA_MOMENTUM, Alignment, alignment_loss

AUTO = "auto"
SUBSET = 32  # end to end: the rows of a batch whose network effects are computed
EVERY = 1  # end to end: every how many batches
# frozen: about this many cached rows a batch. 16, 32 and every row measured alike on the pretrained MiniLM over
# 5 seeds (docs/results/network-alignment.md); 16 keeps the one-off cache under one feature extraction
FROZEN_SUBSET = 16
# frozen, texts: the cache's rows in length order, in batches of at most this many (docs/results/dispatch.md)
TEXT_BATCH = 32


def resolved_removal(backbone, removal: str = AUTO) -> str:
    """``removal`` (a network-scope removal or auto, as TrainingSettings.align_removal declares); ``auto``: ``bypass``
    where every tapped block's output has its input's shape on a probe batch, else ``mean``."""
    if removal != AUTO:
        if removal in BY_INPUT:  # one line, before any training, for a block that changes shape
            _probe_inputs(backbone)
        return removal
    try:
        _probe_inputs(backbone)
    except LayaError:
        return "mean"
    return "bypass"


def can_bypass(backbone) -> bool:
    """Whether every tapped block's output has its input's shape on a probe batch (a block can be bypassed)."""
    try:
        _probe_inputs(backbone)
    except LayaError:
        return False
    return True


def _probe_inputs(backbone) -> None:
    was = backbone.training
    try:
        with torch.no_grad():
            backbone.eval().activations_and_inputs(backbone.probe_input())
    finally:
        backbone.train(was)


def cached_rows(n: int, batch_size: int, seed: int, subset: int = FROZEN_SUBSET, limit: int | None = None) -> Tensor:
    """The sorted training rows whose removals a frozen backbone caches: a seeded ``subset / batch_size`` share of
    the n rows (all of them when a batch is no larger than ``subset``), at most ``limit``, at least one. A limit
    keeps the first rows of the same seeded draw: a capped cache is part of the uncapped one."""
    keep = n if batch_size <= subset else max(1, -(-n * subset // batch_size))
    keep = keep if limit is None else max(1, min(keep, limit))
    if keep >= n:
        return torch.arange(n)
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:keep].sort().values


def removal_row_mib(dims: Sequence[int], dtype=torch.float32) -> float:
    """MiB the cached removals of one training row take: per block i, the pooled taps i..L."""
    size = torch.empty((), dtype=dtype).element_size()
    return sum(sum(dims[i:]) for i in range(len(dims))) * size / 2**20


def frozen_removals(
    net: NetworkScope, images, device: str, batch_size: int = 256, dtype=None, text_batch: int = TEXT_BATCH
) -> list[list[Tensor]]:
    """Per block i, the pooled taps i..L of every given image with block i removed (one row per image, on the CPU):
    once, for a frozen backbone. Texts (token batches) run as the extraction runs them, from the shortest to the
    longest in batches of at most ``text_batch``, so that each batch is cut to its own longest text, not the draw's;
    the rows come back in the given order. Images run as given."""
    order = length_order(images)
    if order is not None:
        images, batch_size = images[order], min(batch_size, text_batch)
    parts: list[list[list[Tensor]]] = []
    n = len(images)
    net.backbone.eval()
    for xb in track(
        image_batches(images, batch_size, 0, n),
        "network target (train)",
        -(-n // batch_size),
        unit="batch",
        of=f"of {batch_size} inputs",
    ):
        x = to_float_images(to_device(xb, device))
        removed = net.removed_taps(x, net.activations(x))
        parts.append([[t.detach().to("cpu", dtype or t.dtype) for t in taps] for taps in removed])
    back = None if order is None else torch.argsort(order)  # each row back at its place in ``images``
    return [
        [_in_order(torch.cat([p[i][j] for p in parts]), back) for j in range(len(parts[0][i]))]
        for i in range(len(parts[0]))
    ]


def _in_order(rows: Tensor, back: Tensor | None) -> Tensor:
    return rows if back is None else rows[back]


class NetworkAlignment(Alignment):
    """``weight · ranking_loss(log α, Δᴺ)`` (module docstring). ``removed``: the frozen backbone's cached removals
    (``frozen_removals``) of the training rows ``rows`` (``cached_rows``; the batches then carry their row indices:
    ``needs_rows``); None: end to end."""

    def __init__(
        self,
        weight: float,
        net: NetworkScope,
        removed: list[list[Tensor]] | None = None,
        scope: str = "scorer",
        subset: int = SUBSET,
        every: int = EVERY,
        momentum: float = EMA_MOMENTUM,
        rows: Tensor | None = None,
        loss: str = "rank",
        sharpness: float = 1.0,
    ):
        super().__init__(weight, None, momentum, scope, loss, sharpness)
        self.net, self.removed, self.subset, self.every = net, removed, subset, every
        self.needs_rows = removed is not None
        if removed is not None:  # training row -> its place in the cache (−1: not cached)
            rows = torch.arange(len(removed[0][0])) if rows is None else rows
            self.slot = torch.full((int(rows.max()) + 1,), -1, dtype=torch.long)
            self.slot[rows] = torch.arange(len(rows))
        self.steps = 0  # end to end: batches seen (resumable)
        self.tap_reference: list[Tensor] | None = None  # end to end, mean / mean-update: the running mean
        self.head_term: Alignment | None = None  # align_target "both": the head's own term, added on every batch

    def loss(self, head: nn.Module, feats: Sequence[Tensor], logits: Tensor, inputs=None, rows=None) -> Tensor:
        term = self._network_loss(head, feats, logits, inputs, rows)
        if self.head_term is None:
            return term
        self.head_term.data_parallel = self.data_parallel  # the loop sets it on this term only
        return term + self.head_term.loss(head, feats, logits)

    def _network_loss(self, head: nn.Module, feats: Sequence[Tensor], logits: Tensor, inputs, rows) -> Tensor:
        if self.removed is not None:
            if rows is None:
                raise LayaError("the network alignment target of a frozen backbone needs the batch's rows")
            return self.weight * self._frozen_loss(head, feats, logits.detach().argmax(-1), rows)
        self.steps += 1
        if (self.steps - 1) % self.every:
            return logits.new_zeros(())
        x = to_device(inputs[0][: self.subset], logits.device)
        feats, target, delta = self.end_to_end_effects(head, x, self.data_parallel)
        return self.weight * alignment_loss(
            head, feats, target, None, self.scope, delta, self.data_parallel, self.fit, self.sharpness
        )

    def _frozen_loss(self, head: nn.Module, feats: Sequence[Tensor], target: Tensor, rows: Tensor) -> Tensor:
        rows = rows.cpu()
        at = torch.where(rows < len(self.slot), self.slot[rows.clamp_max(len(self.slot) - 1)], -1)
        keep = at >= 0
        if not keep.any() and not self.data_parallel:  # no cached row in this batch
            return target.new_zeros((), dtype=feats[0].dtype)
        on = keep.to(feats[0].device)
        feats, target, at = [f.detach()[on] for f in feats], target[on], at[keep]
        if len(at):
            removed = [[t[at].to(feats[0].device) for t in taps] for taps in self.removed]
            delta = removal_effects(head, feats, removed, target)
        else:  # data-parallel (a store under torchrun): this rank still takes part in the term's count
            delta = feats[0].new_zeros((0, len(feats)))
        return alignment_loss(
            head, feats, target, None, self.scope, delta, self.data_parallel, self.fit, self.sharpness
        )

    def end_to_end_effects(
        self, head: nn.Module, x: Tensor, data_parallel: bool = False
    ) -> tuple[list[Tensor], Tensor, Tensor]:
        """(r_1..r_L, ŷ, Δᴺ) of the inputs ``x`` as the network-scope audit computes them (backbone and head in eval
        mode, then back as they were); ``mean``/``mean-update`` first fold these rows into the running mean.

        ``data_parallel`` (torchrun: every rank holds the same ``x``, the first rows of the global batch): every rank
        folds all of them into the running mean (the same on every rank, no collective), then computes Δᴺ of its
        contiguous share of them only (``distributed.my_rows``), which may be empty."""
        backbone, modes = self.net.backbone, (self.net.backbone.training, head.training)
        backbone.eval(), head.eval()
        try:
            x = to_float_images(x)
            hs = self.net.activations(x)
            self._update_reference(hs)
            if data_parallel:
                x, hs = distributed.my_rows(x), [distributed.my_rows(h) for h in hs]
                self.net.inputs = [distributed.my_rows(t) for t in self.net.inputs]
            with torch.no_grad():
                feats = self.net.pooled(hs)
                if not len(x):  # this rank's share of the rows is empty: it still takes part in the term's count
                    return feats, torch.zeros(0, dtype=torch.long, device=x.device), feats[0].new_zeros((0, len(hs)))
                target = head(feats).logits.argmax(-1)
                delta = self.net.effects(x, hs, feats, target)
        finally:
            backbone.train(modes[0]), head.train(modes[1])
        return feats, target, delta

    def _update_reference(self, hs: Sequence[Tensor]) -> None:
        """``mean`` / ``mean-update`` end to end: the running mean of the raw activations (or updates), as the fill."""
        if self.net.ablation not in ("mean", "mean-update"):
            return
        what = hs if self.net.ablation == "mean" else [h - given for h, given in zip(hs, self.net.inputs)]
        means = [t.detach().float().mean(0) for t in what]
        same = self.tap_reference is not None and all(
            r.shape == m.shape for r, m in zip(self.tap_reference, means)
        )  # a text batch of another length starts the mean again
        self.tap_reference = (
            [self.momentum * r.to(m.device) + (1 - self.momentum) * m for r, m in zip(self.tap_reference, means)]
            if same
            else means
        )
        self.net.reference = self.tap_reference

    def state_dict(self) -> dict:
        ref = None if self.tap_reference is None else [r.cpu() for r in self.tap_reference]
        head = None if self.head_term is None else self.head_term.state_dict()
        return {"reference": None, "tap_reference": ref, "steps": self.steps, "head_term": head}

    def load_state_dict(self, state: dict | None) -> None:
        if not state:
            return
        if self.head_term is not None:
            self.head_term.load_state_dict(state.get("head_term"))
        self.steps = int(state.get("steps", 0))
        if state.get("tap_reference") is not None:
            self.tap_reference = list(state["tap_reference"])
            self.net.reference = self.tap_reference


def network_alignment(
    weight: float,
    backbone,
    head: nn.Module,
    scope: str,
    device: str,
    train_images=None,
    removal: str = AUTO,
    feature_dtype=None,
    batch_size: int = 128,
    seed: int = 0,
    loss: str = "rank",
    sharpness: float = 1.0,
) -> tuple[NetworkAlignment, str]:
    """The network-target term and the removal it resolved to. ``train_images``: a frozen backbone's training inputs
    (in the order of its features: a tensor, or ``LazyImages`` decoded batch by batch), whose removals are cached now
    for the rows ``cached_rows(n, batch_size, seed)``, as many of them as fit the in-memory budget
    (``LAYA_IN_MEMORY_MB``; fewer rows, the first of the same seeded draw, with one line saying so); None: end to
    end."""
    removal = resolved_removal(backbone, removal)
    frozen = train_images is not None
    reference = None
    if removal in ("mean", "mean-update") and frozen:  # the audit's reference for a frozen backbone
        of = tap_outputs if removal == "mean" else tap_updates
        reference = tap_means(backbone, train_images, device=device, description="network target: tap means", of=of)
    net = NetworkScope(backbone, head, reference, ablation=removal)
    removed = rows = None
    if frozen:
        n, wanted = len(train_images), cached_rows(len(train_images), batch_size, seed)
        dims = backbone.dims(to_float_images(to_device(train_images[:1], device)), packed=True)  # decodes one
        # LAYA_IN_MEMORY_MB=0 streams the features; the cache cannot stream, so it keeps the default budget then
        row_mib, budget = removal_row_mib(dims, feature_dtype or torch.float32), in_memory_budget_mb() or IN_MEMORY_MB
        rows = cached_rows(n, batch_size, seed, limit=int(budget // row_mib) if row_mib else None)
        what = f"the pooled taps with each of {net.num_layers} blocks removed"
        if len(rows) < len(wanted):
            log(
                f"network alignment target: {what} of {len(wanted)} training rows ({len(wanted) * row_mib:,.1f} MiB) "
                f"exceed the in-memory budget (LAYA_IN_MEMORY_MB={budget:g}): caching them for {len(rows)} of "
                f"{n} rows (about {len(rows) * batch_size / n:.1f} a batch, not {min(FROZEN_SUBSET, batch_size)})"
            )
        else:
            log(
                f"network alignment target: caching {what}, for {len(rows)} of {n} training rows "
                f"(about {min(FROZEN_SUBSET, batch_size)} a batch)"
            )
        removed = frozen_removals(net, take(train_images, rows), device, dtype=feature_dtype)
    return NetworkAlignment(weight, net, removed, scope, rows=rows, loss=loss, sharpness=sharpness), removal
