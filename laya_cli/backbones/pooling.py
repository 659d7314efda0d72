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

The declaration comes from the model's family (timm: ``output_fmt`` and ``num_prefix_tokens``;
torchvision: per family; ours: per model). The tensor's rank is only *checked* against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
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
