"""What every audit writes around its per-batch work: the scaffold both scopes (and the export) share.

A head-scope audit (``run.run_audit``) and a network-scope one (``network.batches``, run by
``job.run_scoped_audit``) differ only in what they compute on a batch. Everything around that lives here, once:

- ``AuditPlan.prepare``: the method names (case-insensitive), the empty-data check,
  which methods the head cannot support, the head's references (what a removed layer takes, IG's
  baseline r̄), this rank's shard of the batches; then the settings dict of the JSON and the notes;
- ``Shard``: this rank's contiguous whole batches under torchrun, walked with a progress bar, and
  generators that replay the draws of earlier ranks' batches (so every number is one process's);
- ``Rows``: per-sample rows appended batch by batch and gathered back in sample order on every rank
  (torchmetrics' ``add_state`` + sync: states are declared before the first batch, so a rank with
  an empty shard still takes part in every gather);
- ``audit_notes``: what the settings and the head make of the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import Tensor

from ..model.heads import head_kind
from ..runtime.distributed import active as distributed
from ..runtime.distributed import cat_rows, gather_rows, gathered_sum, shard_bounds
from ..runtime.errors import LayaError, match_choice
from ..runtime.progress import track
from .methods import AttributionContext, random_scores
from .metrics import COMPLETENESS_FLAG, RANDOMISATION_FLAG
from .names import parse_metric_groups
from .registry import METHODS, unavailable_reason
from .settings import AuditSettings

if TYPE_CHECKING:
    from .results import MethodScores

T = TypeVar("T")


def audit_methods(methods: Iterable[str]) -> list[str]:
    """The methods an audit runs: each name matched case-insensitively (``IG`` = ``ig``), repeats dropped.
    Takes any of ``registry.METHODS``; ``names.parse_methods`` parses ``--compare``."""
    return list(dict.fromkeys(match_choice("method", m, METHODS) for m in methods))


def check_samples(n: int) -> None:
    if n == 0:
        raise LayaError("nothing to audit: the data set has no samples")


# --------------------------------------------------------------------------- batches and their rows


@dataclass
class Shard:
    """This rank's contiguous whole batches of ``n`` samples (``shard_bounds``): all of them without torchrun."""

    n: int
    batch_size: int

    def __post_init__(self):
        self.start, self.stop = shard_bounds(self.n, self.batch_size)

    @property
    def n_batches(self) -> int:
        return (self.stop - self.start + self.batch_size - 1) // self.batch_size

    def walk(self, batches: Iterable[T], description: str) -> Iterator[tuple[int, T]]:
        """(first row, batch) of this rank's ``batches`` (those of rows [start, stop)), with a progress bar."""
        first = range(self.start, self.stop, self.batch_size)
        of = f"of {self.batch_size} samples"
        return track(zip(first, batches), description, total=self.n_batches, unit="batch", of=of)

    def generator(self, seed: int, n_layers: int, replay: bool = True) -> torch.Generator:
        """A generator seeded with ``seed`` that has drawn ``random_scores`` for every batch of the earlier
        ranks (``replay``), as one process would have by this rank's first batch."""
        g = torch.Generator().manual_seed(seed)
        for s in range(0, self.start, self.batch_size) if replay else ():
            random_scores(min(self.batch_size, self.n - s), n_layers, g)
        return g


class Rows:
    """Per-sample rows computed batch by batch, gathered back in sample order on every rank.

    As torchmetrics' ``add_state`` + sync: declare each state before the first batch (``add_state``,
    in the same order on every rank: a rank with no batch still takes part in each gather), ``append``
    each batch's rows, ``gather`` once at the end. ``reduce="sum"``: a state of per-batch (1, width)
    sums, added in batch order (``gathered_sum``: bit-identical to one process). Without torchrun the
    gather is a concatenation.
    """

    def __init__(self, n: int):
        self.n = n
        self._states: dict[str, tuple[torch.dtype, int | None, str]] = {}
        self._parts: dict[str, list[Tensor]] = {}

    def add_state(self, name: str, dtype: torch.dtype = torch.float64, width: int | None = None, reduce="cat") -> Rows:
        """A state of (B,) rows, or (B, width) ones; ``dtype`` and ``width`` also shape an empty shard's."""
        if reduce not in ("cat", "sum"):
            raise ValueError(f"reduce must be cat or sum, not {reduce!r}")
        self._states[name] = (dtype, width, reduce)
        self._parts[name] = []
        return self

    def add_states(self, names: Iterable[str], dtype: torch.dtype = torch.float64, width=None, reduce="cat") -> Rows:
        """Several states alike."""
        for name in names:
            self.add_state(name, dtype, width, reduce)
        return self

    def __contains__(self, name: str) -> bool:
        """Whether the state was declared (a state kept only for some heads, such as α)."""
        return name in self._states

    def append(self, rows: Mapping[str, Tensor] | None = None, /, **more: Tensor) -> None:
        """One batch's rows of some states (``rows`` and ``more``: name -> tensor), each cast to its dtype."""
        for name, value in {**(rows or {}), **more}.items():
            self._parts[name].append(value.to(self._states[name][0]))

    def gather(self) -> dict[str, Tensor]:
        """Every state: all ranks' rows in sample order (``reduce="sum"``: the (width,) total)."""
        out, sharded = {}, distributed()
        for name, (dtype, width, reduce) in self._states.items():
            parts = self._parts[name]
            if reduce == "sum":
                out[name] = gathered_sum(parts, width)
            elif not sharded and len(parts) == 1:  # one batch in one process: its rows as they are, no copy
                out[name] = parts[0]
            elif dtype == torch.bool and sharded:  # gathered as uint8: every backend gathers it
                out[name] = gather_rows(cat_rows(parts, dtype, width).to(torch.uint8), self.n).bool()
            else:
                out[name] = gather_rows(cat_rows(parts, dtype, width), self.n)
        return out


def to_host(tensors: Sequence[Tensor]) -> list[Tensor]:
    """A batch's tensors on the host in one device-to-host copy (stacked, each back as its own view) where they share
    a shape, dtype and device, else one copy each: both scopes bring Δ, every method's scores and α over so (the
    metrics run on the host in float64; MPS has no float64)."""
    first = tensors[0]
    if len(tensors) > 1 and all(t.shape == first.shape and t.dtype == first.dtype for t in tensors):
        if all(t.device == first.device for t in tensors):
            return list(torch.stack(tensors).cpu().unbind())
    return [t.cpu() for t in tensors]


# --------------------------------------------------------------------------- the plan of an audit


@dataclass(frozen=True)
class References:
    """What a removed layer of the head takes (``removal``: r̄, or None for zero) and IG's baseline.

    Both come from the checkpoint's mean training features r̄. ``mask`` has no input-space reference:
    IG then uses r̄ too; ``zero`` removes to zeros and integrates from zeros."""

    removal: list[Tensor] | None
    baseline: list[Tensor] | None

    @classmethod
    def of(cls, model, ablation: str, device: str) -> References:
        """``ablation``: the head scope's removal (``Removal.head``)."""
        mean = [r.to(device).float() for r in model.reference] if model.reference is not None else None
        if ablation == "zero":
            return cls(removal=None, baseline=[torch.zeros_like(r) for r in mean] if mean else mean)
        return cls(removal=mean, baseline=mean)


@dataclass
class AuditPlan:
    """What an audit fixes before its first batch, the same at either scope."""

    settings: AuditSettings
    methods: list[str]
    reasons: dict[str, str | None]  # why the head cannot support a method (None: it can)
    kind: str  # the head kind
    n_layers: int
    references: References
    shard: Shard
    scale_free: bool = False  # the head normalises every r_i (--layer-norm): Grad×Act through it is ≈ 0

    @classmethod
    def prepare(cls, model, methods: Iterable[str], settings: AuditSettings, n: int, n_layers: int) -> AuditPlan:
        """Check the request (one-line errors before any work) and fix the plan. ``settings``: validated, their
        removal checked against the scope and the head (``job.check_audit``)."""
        methods = audit_methods(methods)
        check_samples(n)
        return cls(
            settings=settings,
            methods=methods,
            reasons={m: unavailable_reason(m, model.head) for m in methods},
            kind=head_kind(model.head),
            n_layers=n_layers,
            references=References.of(model, settings.removal.head, settings.device),
            shard=Shard(n, settings.batch_size),
            scale_free=bool(getattr(model.head, "layer_norm", False)),
        )

    @property
    def n(self) -> int:
        return self.shard.n

    @property
    def groups(self) -> tuple[str, ...]:
        """The deeper metric groups this audit computes (``settings.metrics``, canonical order)."""
        return tuple(parse_metric_groups(self.settings.metrics))

    @property
    def active(self) -> list[str]:
        """The methods the head supports (the others are reported as unavailable)."""
        return [m for m in self.methods if not self.reasons[m]]

    def generator(self, seed: int, replay: bool = True) -> torch.Generator:
        return self.shard.generator(seed, self.n_layers, replay)

    def context(self, target: Tensor, generator: torch.Generator | None, global_weights=None) -> AttributionContext:
        """What the methods need on a batch besides the head and its features."""
        s = self.settings
        return AttributionContext(
            target=target,
            baseline=self.references.baseline,
            n_steps=s.steps,
            internal_batch_size=s.internal_batch_size,
            reduce=s.reduce,
            generator=generator,
            global_weights=global_weights,
        )

    def settings_dict(self, eval_data) -> dict:
        """The ``settings`` of the JSON (its ``ablation``: the head scope's removal, mean where the network removes
        a block by its input)."""
        return {
            **asdict(self.settings),
            "ablation": self.settings.removal.head,
            "methods": self.methods,
            "head": self.kind,
            "dataset": getattr(eval_data, "dataset", None),
            "layers": self.n_layers,
        }

    def notes(self, scores: Mapping[str, MethodScores] | None = None) -> list[str]:
        notes = audit_notes(self.methods, self.reasons, self.n_layers, self.kind, self.settings, scores)
        if self.scale_free:
            notes += _noted(self.methods, "scale_free")
        return notes


def audit_notes(
    methods: Sequence[str],
    reasons: Mapping[str, str | None],
    n_layers: int,
    kind: str,
    settings: AuditSettings,
    scores: Mapping[str, MethodScores] | None = None,
) -> list[str]:
    """What the head, the settings and (given ``scores``) the results make of the numbers: the audit's notes."""
    notes = [f"{m}: {reasons[m]}" for m in methods if reasons[m]]
    if n_layers == 1:
        notes.append(
            "only 1 layer: faithfulness (a rank correlation over layers) is undefined for every sample, "
            "and Deletion@1 equals its oracle and random expectation"
        )
    elif n_layers < 3:
        notes.append(
            f"only {n_layers} layers: faithfulness (Spearman over {n_layers} values) can only be ±1 "
            "and means little; tap at least 3 layers"
        )
    if kind == "last":
        notes.append("the last head reads only the last layer: removing any other layer changes nothing (Δ_i = 0)")
    if kind == "scalarmix":
        notes += _noted(methods, "scalarmix")
    if settings.removal.head == "mask":
        notes += _noted(methods, "mask")
    if settings.randomisation_samples == 0 and "randomisation" in parse_metric_groups(settings.metrics):
        notes.append("model-randomisation check skipped (--randomisation-samples 0)")
    for m, s in (scores or {}).items():
        if s.completeness_flagged:
            notes.append(
                f"{m}: completeness {s.completeness:.3f} < {COMPLETENESS_FLAG:g}: its attributions miss "
                f"{100 * (1 - s.completeness):.1f} % of the effect they explain (Captum's convergence "
                f"delta); raise --steps (now {settings.steps})"
            )
        if s.randomisation_flagged and not METHODS[m].model_free:  # random: model-independent by construction
            notes.append(
                f"{m}: model-randomisation check: its layer scores keep Spearman "
                f"{s.randomisation_spearman:.2f} with those of the re-initialised head (randomisation "
                f"{s.randomisation:.2f} < {RANDOMISATION_FLAG:g}): they barely depend on the head's parameters"
            )
    return notes


def _noted(methods: Sequence[str], situation: str) -> list[str]:
    """What the records of ``methods`` note in ``situation`` (``Method.notes``), in their order."""
    return [note for m in methods if (note := METHODS[m].note(situation))]
