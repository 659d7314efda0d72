"""Tap formats and pooling: each tap declares its layout, and pooling follows the declaration.

A raw tap output h_i becomes r_i = pool(h_i):

==========  ======================  ===============================================
format      shape                   r_i
==========  ======================  ===============================================
``NC``      B×D                     h_i
``NCHW``    B×C×H×W                 mean over H, W
``NHWC``    B×H×W×C (Swin)          mean over H, W
``NLC+P``   B×(P+N)×D, P prefix     ``cls``: token 0; ``mean``: mean of the N
            (class/distillation)    non-prefix tokens (timm's ``avg`` pool)
``NLC``     B×L×D text, with its    ``cls``: token 0; ``mean``: mean over the real
            attention mask B×L      tokens; ``last``: the last real token (decoders)
==========  ======================  ===============================================

Token sequences come with their attention mask (1 = a real token, 0 = padding, right-padded): padding
never enters r_i.

The positions a tap keeps for α's reader (``--alpha-reader positions``, ``tap_positions``): a spatial map (and
the square patch grid of an image transformer, after its prefix tokens) adaptive-average-pooled to at most
8×8 = 64 positions; a text's tokens as they are, padded (masked) to the text input's ``max_length``; other token
sequences pooled to at most 64. ``pack_positions`` puts them after r_i in one row per sample,
``[r_i | valid (P) | positions (P×d_i)]``, so the packed row travels where r_i travels (caches, batches, devices,
audits) and the head takes it apart again (``unpack_positions``, with the layer's width d_i).

The declaration comes from the model's family (timm: ``output_fmt`` and ``num_prefix_tokens``;
torchvision: per family; ours: per model). The tensor's rank is only *checked* against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..runtime.errors import LayaError

_NDIM = {"NC": 2, "NLC": 3, "NCHW": 4, "NHWC": 4}


@dataclass(frozen=True)
class TapFormat:
    layout: str  # NC | NCHW | NHWC | NLC
    prefix: int = 0  # NLC only: leading prefix tokens (class, distillation, registers)

    def __str__(self) -> str:
        return f"NLC+{self.prefix}" if self.layout == "NLC" and self.prefix else self.layout

    @classmethod
    def parse(cls, text: str) -> TapFormat:
        layout, _, prefix = str(text).partition("+")
        if layout not in _NDIM or (prefix and (layout != "NLC" or not prefix.isdigit())):
            raise LayaError(f"unknown tap format '{text}' (expected NC, NCHW, NHWC, NLC or NLC+P)")
        return cls(layout, int(prefix or 0))

    @property
    def ndim(self) -> int:
        return _NDIM[self.layout]

    def width(self, shape) -> int:
        """The feature width d_i that pooling leaves."""
        return int(shape[1] if self.layout == "NCHW" else shape[-1])

    def spatial(self, shape) -> tuple[int, ...]:
        """Spatial size (H, W) of a 4-D output; () for vectors and token sequences."""
        if self.layout == "NCHW":
            return tuple(shape[2:4])
        if self.layout == "NHWC":
            return tuple(shape[1:3])
        return ()

    def check(self, h, name: str) -> Tensor:
        if not isinstance(h, Tensor):
            raise LayaError(
                f"layer {name} outputs a {type(h).__name__}, not a tensor; it cannot be pooled — "
                "choose other layers with --layers"
            )
        if h.ndim != self.ndim:
            raise LayaError(
                f"layer {name} produced a {h.ndim}-D output of shape {tuple(h.shape)} but its declared "
                f"format is {self}; it cannot be pooled — choose other layers with --layers"
            )
        return h

    def pool(self, h: Tensor, how: str = "mean", name: str = "?", mask: Tensor | None = None) -> Tensor:
        """r_i from a raw tap output; ``how`` (cls | mean | last) only matters for token sequences,
        ``mask`` (B×L, text) keeps padding out of them."""
        self.check(h, name)
        if self.layout == "NC":
            return h
        if self.layout == "NCHW":
            return h.mean(dim=(2, 3))
        if self.layout == "NHWC":
            return h.mean(dim=(1, 2))
        if how == "cls":
            return h[:, 0]
        if mask is not None:
            return masked_pool(h, mask, how)
        if how == "last":
            return h[:, -1]
        tokens = h[:, self.prefix :] if h.shape[1] > self.prefix else h
        return tokens.mean(dim=1)


def masked_pool(h: Tensor, mask: Tensor, how: str) -> Tensor:
    """Mean over the real tokens, or the last real token, of B×L×D ``h`` under a right-padded B×L mask."""
    mask = mask.to(h.dtype)
    if how == "last":
        last = (mask.sum(dim=1).long() - 1).clamp(min=0)
        return h[torch.arange(len(h), device=h.device), last]
    return (h * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)


POSITION_GRID = 8  # a map is read at most 8×8 positions: enough to say where a block's work lands, 64 rows to store


def tap_positions(fmt: TapFormat, h: Tensor, mask: Tensor | None, cap: int, name: str = "?") -> tuple[Tensor, Tensor]:
    """The positions α's reader attends over: (B, P, d) and their validity (B, P; 0 = padding). ``cap``: how many
    token positions a text keeps (its ``max_length``: one width for every batch, however it was trimmed)."""
    fmt.check(h, name)
    if fmt.layout == "NC":
        raise LayaError(
            f"layer {name} outputs a vector (B×D): it has no positions for --alpha-reader positions "
            "(tokens or a spatial map); use --alpha-reader pooled"
        )
    if fmt.layout == "NHWC":
        h = h.permute(0, 3, 1, 2)
    if fmt.layout in ("NCHW", "NHWC"):
        return _grid(h), h.new_ones(h.shape[0], _grid_size(h.shape[2:]))
    if mask is not None:  # text: every real token, padding masked, one width (cap) for every batch
        h, mask = h[:, :cap], mask[:, :cap].to(h.dtype)
        pad = cap - h.shape[1]
        return F.pad(h, (0, 0, 0, pad)), F.pad(mask, (0, pad))
    prefix, n = fmt.prefix, h.shape[1] - fmt.prefix
    side = math.isqrt(n)
    if side * side == n:  # an image transformer: its prefix tokens, then its patch grid pooled like a map
        grid = h[:, prefix:].transpose(1, 2).reshape(h.shape[0], h.shape[2], side, side)
        pos = torch.cat([h[:, :prefix], _grid(grid)], dim=1)
    else:
        pos = F.adaptive_avg_pool1d(h.transpose(1, 2), min(h.shape[1], POSITION_GRID**2)).transpose(1, 2)
    return pos, h.new_ones(pos.shape[:2])


def _grid_size(hw) -> int:
    return min(int(hw[0]), POSITION_GRID) * min(int(hw[1]), POSITION_GRID)


def _grid(h: Tensor) -> Tensor:
    """A B×C×H×W map as (B, P, C) positions, at most POSITION_GRID × POSITION_GRID of them."""
    size = (min(h.shape[2], POSITION_GRID), min(h.shape[3], POSITION_GRID))
    return F.adaptive_avg_pool2d(h, size).flatten(2).transpose(1, 2)


def pack_positions(r: Tensor, pos: Tensor, valid: Tensor) -> Tensor:
    """One row per sample, ``[r_i | valid | positions]``: B × (d + P·(d + 1))."""
    return torch.cat([r, valid.to(r.dtype), pos.to(r.dtype).flatten(1)], dim=1)


def unpack_positions(row: Tensor, d: int) -> tuple[Tensor, Tensor, Tensor]:
    """``pack_positions`` undone for a layer of width ``d``: r_i (B, d), valid (B, P), positions (B, P, d)."""
    extra = row.shape[-1] - d
    if extra <= 0 or extra % (d + 1):
        raise LayaError(
            f"a layer of width {d} came with {row.shape[-1]} features, which are no packed positions: the positions "
            "reader needs the backbone's taps with their positions (a checkpoint's own backbone)"
        )
    p = extra // (d + 1)
    return row[:, :d], row[:, d : d + p], row[:, d + p :].reshape(len(row), p, d)


@dataclass(frozen=True)
class Layouts:
    """A model's declared layouts, by output rank: what a 4-D or 3-D tap output means there."""

    spatial: str = "NCHW"  # how 4-D outputs are laid out: NCHW, or NHWC (Swin)
    prefix: int = 0  # prefix tokens of 3-D token outputs (ViT: 1 class token; DeiT distilled: 2)

    def resolve(self, h, name: str) -> TapFormat:
        if isinstance(h, Tensor):
            if h.ndim == 2:
                return TapFormat("NC")
            if h.ndim == 3:
                return TapFormat("NLC", self.prefix)
            if h.ndim == 4:
                return TapFormat(self.spatial)
            raise LayaError(
                f"layer {name} produced a {h.ndim}-D output of shape {tuple(h.shape)}; laya pools "
                "B×D, B×C×H×W, B×H×W×C and B×N×D outputs — choose other layers with --layers"
            )
        raise LayaError(
            f"layer {name} outputs a {type(h).__name__}, not a tensor; it cannot be pooled — "
            "choose other layers with --layers"
        )


def pool_tokens(h: Tensor, pool: str) -> Tensor:
    """Rank-only pooling (B×D identity, B×C×H×W mean, B×N×D CLS or mean of all tokens).

    Kept for callers of the old API; taps pool with their declared ``TapFormat`` instead.
    """
    if h.ndim == 2:
        return h
    if h.ndim == 4:
        return h.mean(dim=(2, 3))
    if h.ndim == 3:
        return h[:, 0] if pool == "cls" else h.mean(dim=1)
    raise LayaError(f"cannot pool a layer output of shape {tuple(h.shape)}")
