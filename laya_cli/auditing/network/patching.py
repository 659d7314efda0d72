"""``NetworkScope``: a tap's output replaced inside the backbone and the later layers run on (activation patching):
the fill of each removal, the tap activations, the later layers from a patched tap (only those on a chain), the total
effects Δ_i."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ...backbones.adapters import stack_copies
from ...runtime.errors import LayaError
from ...runtime.progress import within
from ..metrics import STACK_MIN_ROWS, target_probability
from ..settings import BY_INPUT
from .methods import LayerAttributions, blended_layer_ig


class NetworkScope(LayerAttributions):
    """Patched passes for one tapped backbone and head (Captum's layer attributions on them: ``LayerAttributions``).

    ``reference``: one unpooled activation per tap (no batch dimension), or None for zeros.
    ``prefix``: use ``continue_from`` (default: when the backbone can continue); False forces full
    passes with a replacing hook (what non-chain backbones get).
    ``ablation``: how tap i is removed (``Removal.network``, trusted): its output := ``reference[i]`` (mean, zero), its
    input (bypass), or its input + ``reference[i]`` (mean-update: ``reference`` then holds the mean updates). The
    inputs are the last batch's, recorded by ``activations``.
    """

    def __init__(
        self,
        backbone,
        head: nn.Module,
        reference: Sequence[Tensor] | None = None,
        prefix: bool | None = None,
        ablation: str = "mean",
    ):
        self.backbone, self.head = backbone, head
        self.ablation, self.by_input = ablation, ablation in BY_INPUT
        self.inputs: list[Tensor] = []  # by-input removals: each tap's input on the last batch
        self.stack_rows = 0  # the most rows the removals' suffixes may run stacked (the audit's memory plan)
        self.modules = backbone.tap_modules()  # a tap that is not a module cannot be patched: one line
        n = len(backbone.layer_names)
        if reference is not None and len(reference) != n:
            raise LayaError(f"the network reference has {len(reference)} layers but the backbone taps {n}")
        self.reference = None if reference is None else [r.float() for r in reference]
        self.prefix = backbone.can_continue if prefix is None else bool(prefix)
        if self.prefix and not backbone.can_continue:
            raise LayaError("this backbone cannot continue from a tap (see docs/backbones.md)")

    @property
    def num_layers(self) -> int:
        return len(self.modules)

    def fill(self, i: int, h: Tensor, rows: Tensor | None = None, copy: bool = False) -> Tensor:
        """What tap i's output ``h`` is replaced by, shaped like it: the reference activation, or (by-input
        removals) the tap's input on the last batch — its ``rows`` only, or repeated as Captum stacks copies.
        A bypass's fill of the whole batch is the kept input itself (read: AtP, IG's baseline, the staircase's
        concatenation) unless ``copy`` asks for one of its own (a patched pass whose blocks may work in place on
        what they are given)."""
        given = None
        if self.by_input:
            if not self.inputs:
                raise LayaError(f"--ablation {self.ablation} needs the batch's activations first")
            given = self.inputs[i] if rows is None else self.inputs[i][rows.to(self.inputs[i].device)]
            copies = len(h) // len(given)
            if copy or copies > 1:
                given = stack_copies(given, copies)
            given = given.to(h.dtype)
            if self.ablation == "bypass":
                return given
        if self.reference is None:
            return torch.zeros_like(h)
        ref = self._reference(i, h)
        return ref if given is None else given + ref

    def _reference(self, i: int, h: Tensor) -> Tensor:
        """``reference[i]`` expanded to the batch ``h`` (a text batch cut after its longest: its first positions)."""
        ref = self.reference[i].to(h.device, h.dtype)
        cut = h.ndim >= 3 and ref.ndim == h.ndim - 1 and ref.shape[0] > h.shape[1] and ref.shape[1:] == h.shape[2:]
        if cut:  # a batch of texts cut after its longest (per position: B×L×d, or B×L×streams×d as DeepSeek-V4's)
            ref = ref[: h.shape[1]]
        if tuple(ref.shape) != tuple(h.shape[1:]):
            raise LayaError(
                f"the mean activation of layer {self.backbone.layer_names[i]} has shape "
                f"{tuple(ref.shape)} but the model gives {tuple(h.shape[1:])} (another input size?)"
            )
        return ref.unsqueeze(0).expand_as(h)

    def pooled(self, hs: Sequence[Tensor], first: int = 0) -> list[Tensor]:
        return [self.backbone.pool_tap(first + j, h) for j, h in enumerate(hs)]

    def probs(self, feats: Sequence[Tensor]) -> Tensor:
        return torch.softmax(self.head(list(feats)).logits, dim=-1)

    @torch.no_grad()
    def activations(self, x: Tensor) -> list[Tensor]:
        """Raw tap activations h_1..h_L of a batch of float images (one pass); the taps' inputs are kept too
        when a removal needs them."""
        return self.taps(x)

    def taps(self, x: Tensor) -> list[Tensor]:
        """``activations`` in the caller's grad mode: the backbone's own engine, and the taps' inputs kept
        (``inputs``) where a removal needs them. With gradients on, the pass Captum's layer gradients run through
        (``taps_and_gradients``)."""
        if not self.by_input:
            return self.backbone.activations(x)
        hs, self.inputs = self.backbone.activations_and_inputs(x)
        return hs

    @property
    def one_pass(self) -> bool:
        """Whether the batch's own pass can carry Captum's layer gradients (``taps_and_gradients``): the backbone
        runs by forward hooks (its ``hooks`` or ``replay`` engine), as Captum's pass does, so its taps are the same
        bits either way. A traced graph (``fx``) or timm's ``forward_intermediates`` keeps its own pass and Captum's."""
        return getattr(self.backbone, "engine_kind", None) in ("hooks", "replay")

    def later(self, i: int, h: Tensor, x: Tensor) -> list[Tensor]:
        """h_{i+1}..h_L with tap i's output = ``h``: only the later layers on a chain, else a full pass."""
        if self.prefix:
            return self.backbone.continue_from(i, h)
        return self.backbone.patched_activations(x, i, h)[i + 1 :]

    @torch.no_grad()
    def removed_taps(self, x: Tensor, hs: Sequence[Tensor]) -> list[list[Tensor]]:
        """Per tap i, the pooled taps i..L with tap i removed inside the network (the earlier taps do not change):
        tap i's fill, then the layers after it (a chain) or a full pass. ``hs``: ``activations(x)``. On a chain whose
        L·B rows fit ``stack_rows`` the removals run stacked (``_stacked_removed_taps``), else one pass per layer."""
        if self._stacks(hs):
            return self._stacked_removed_taps(hs)
        removed = []
        for i, h in within(list(enumerate(hs))):  # one patched pass per layer: progress inside a long batch
            fill = self.fill(i, h, copy=True)
            removed.append([self.backbone.pool_tap(i, fill), *self.pooled(self.later(i, fill, x), i + 1)])
        return removed

    def _stacks(self, hs: Sequence[Tensor]) -> bool:
        """Whether ``removed_taps`` runs the removals stacked: on a chain, L·B rows within ``stack_rows``, and each
        tap at least ``STACK_MIN_ROWS`` rows as a matrix product sees it (B × its positions)."""
        matrix_rows = min(h.numel() // max(h.shape[-1], 1) for h in hs)
        return self.prefix and len(hs) * len(hs[0]) <= self.stack_rows and matrix_rows >= STACK_MIN_ROWS

    def _stacked_removed_taps(self, hs: Sequence[Tensor]) -> list[list[Tensor]]:
        """``removed_taps`` on a chain as a staircase (``_staircase``), each step's rows split by removal."""
        n, removed = len(hs[0]), [[] for _ in hs]
        for pools in self._staircase(hs):
            for r, rows in enumerate(pools[0].split(n) if len(pools) == 1 else pools):
                removed[r].append(rows)
        return removed

    def _staircase(self, hs: Sequence[Tensor]) -> list[list[Tensor]]:
        """Per tap j, its pooled taps under the removals 0..j, stacked along the batch in that order: before the
        modules after tap j, the removals 0..j−1 (their tap j, patched earlier) and removal j (tap j's fill) stacked as
        Captum stacks copies, one step of up to L·B rows: L − 1 suffix steps instead of L(L − 1)/2. Each step's rows
        pooled at once (one tensor of (j + 1)·B rows) where that is each removal's pooling bit for bit
        (``_pools_stacked``), else removal by removal (j + 1 tensors)."""
        n, steps, state = len(hs[0]), [], None
        for j, h in within(list(enumerate(hs))):
            fill = self.fill(j, h, copy=state is None)  # the first step's state is the fill itself
            state = fill if state is None else torch.cat([state, fill])
            if _pools_stacked(self.backbone, j, state):
                steps.append([self.backbone.pool_tap(j, state)])
            else:
                steps.append([self.backbone.pool_tap(j, rows) for rows in state.split(n)])
            if j + 1 < len(hs):
                state = self.backbone.continue_from(j, state, upto=j + 2)[0]
        return steps

    @torch.no_grad()
    def effects(self, x: Tensor, hs: Sequence[Tensor], feats: Sequence[Tensor], target: Tensor) -> Tensor:
        """Total effects Δ_i = p_ŷ(x) − p_ŷ(x with tap i patched to the reference inside the network): (B, L).

        One head pass intact plus, per layer, the layers after it (a chain) or a full pass; the L + 1 head passes as
        one of (L + 1)·B rows where the batch has ``STACK_MIN_ROWS`` rows (``stacked_removal_effects``), the
        staircase's steps put in it as they are stacked (``staircase_effects``)."""
        if len(target) < STACK_MIN_ROWS:
            return removal_effects(self.head, feats, self.removed_taps(x, hs), target)
        if self._stacks(hs):
            return staircase_effects(self.head, feats, self._staircase(hs), target)
        return stacked_removal_effects(self.head, feats, self.removed_taps(x, hs), target)


def _pools_stacked(backbone, i: int, state: Tensor) -> bool:
    """Whether pooling tap i's stacked removals at once gives each removal's rows what pooling them alone gives, bit
    for bit: a tap pooled by picking (a vector tap, the class token, a text's last token: no arithmetic across
    positions), or any pooling on the CPU, whose reductions sum each row alike whatever rows sit beside it
    (tests/test_network_batching.py). A GPU's reduction may split a mean over positions by how many rows it reduces:
    the removals are pooled one by one there."""
    fmt = backbone.tap_format(i, state)
    picks = fmt.layout == "NC" or fmt.layout not in ("NCHW", "NHWC") and backbone.pool in ("cls", "last")
    return state.device.type == "cpu" or picks and not backbone.read_positions  # positions: a grid's means


@torch.no_grad()
def removal_effects(
    head: nn.Module, feats: Sequence[Tensor], removed: Sequence[Sequence[Tensor]], target: Tensor
) -> Tensor:
    """(B, L) Δ_i = p_ŷ(feats) − p_ŷ(feats[:i] + removed[i]): L + 1 head passes. ``removed[i]``: the pooled taps i..L
    with tap i removed inside the network (``NetworkScope.removed_taps``, or those cached for a frozen backbone)."""
    feats = list(feats)
    base = target_probability(head(feats).logits, target)
    patched = [target_probability(head([*feats[:i], *rest]).logits, target) for i, rest in enumerate(removed)]
    return base.unsqueeze(1) - torch.stack(patched, dim=1)


@torch.no_grad()
def stacked_removal_effects(
    head: nn.Module, feats: Sequence[Tensor], removed: Sequence[Sequence[Tensor]], target: Tensor
) -> Tensor:
    """``removal_effects`` in one head pass of (L + 1)·B rows: the intact taps, then per removal i the earlier taps
    intact and its taps i..L removed, stacked along the batch as Captum stacks copies (a head reads its rows
    independently). The same numbers where the batch has ``STACK_MIN_ROWS`` rows."""
    feats, n_removed = list(feats), len(removed)
    rows = [
        torch.cat([f, *(removed[i][layer - i] if i <= layer else f for i in range(n_removed))])
        for layer, f in enumerate(feats)
    ]
    return _stacked_head_effects(head, rows, target, n_removed)


@torch.no_grad()
def staircase_effects(head: nn.Module, feats: Sequence[Tensor], steps: Sequence[Sequence[Tensor]], target: Tensor):
    """``stacked_removal_effects`` from the staircase's steps (``NetworkScope._staircase``: tap j's rows under the
    removals 0..j, in that order, as one tensor or one per removal) as they are: the same rows, without splitting
    each step by removal first."""
    n_removed = len(feats)
    rows = [torch.cat([f, *steps[j], *[f] * (n_removed - 1 - j)]) for j, f in enumerate(feats)]
    return _stacked_head_effects(head, rows, target, n_removed)


def _stacked_head_effects(head: nn.Module, rows: Sequence[Tensor], target: Tensor, n_removed: int) -> Tensor:
    """(B, L) Δ from one head pass of ``rows``: per layer the intact rows, then those of each removal."""
    p = target_probability(head(list(rows)).logits, target.repeat(n_removed + 1)).view(n_removed + 1, -1)
    return p[0].unsqueeze(1) - p[1:].t()


def full_model_layer_ig(
    backbone,
    head: nn.Module,
    x: Tensor,
    target: Tensor,
    reference: Sequence[Tensor] | None,
    layers: Sequence[int] | None = None,
    n_steps: int = 32,
    internal_batch_size: int | None = None,
    reduce: str = "sum",
) -> Tensor:
    """Captum's straightforward route (``methods.blended_layer_ig``) on a NetworkScope of full passes that patches
    with ``reference``: one ``LayerIntegratedGradients`` per tapped layer over the full model. (B, len(layers))."""
    scope = NetworkScope(backbone, head, reference, prefix=False)
    return blended_layer_ig(scope, x, target, layers, n_steps, internal_batch_size, reduce)
