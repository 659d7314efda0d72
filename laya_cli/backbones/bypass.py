"""Dropped layers: a block taken out of the model, its place held by a ``Bypass`` that hands its input on.

Layer-pruning studies remove a residual block by letting the stream skip it (its output := its input). A
``Bypass`` does that without computing the block: it returns the hidden state it was given in the form the block
returned (a tensor, or a tuple whose first item is the hidden state and whose other items — attention weights,
caches a forward without them leaves empty — are None). ``TappedBackbone.dropped`` puts one in place of each dropped
tap's module and checks, on a probe batch, that every tap equals the bypassed forward of the full model
(``TappedBackbone.bypassed_activations``); a model whose later layers need more from a dropped block than its
hidden state (T5's first layer hands on the position bias) fails that check and is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .engines import block_input


class Bypass(nn.Module):
    """A dropped block: ``forward(h, ...) -> h`` (``arity`` None) or ``(h, None, …)`` of the block's tuple length."""

    def __init__(self, arity: int | None = None):
        super().__init__()
        self.arity = arity

    def forward(self, *args, **kwargs):
        h = block_input(args, kwargs)
        return h if self.arity is None else (h, *([None] * (self.arity - 1)))

    def extra_repr(self) -> str:
        return "tensor" if self.arity is None else f"tuple of {self.arity}"


def output_arity(output) -> int | None:
    """What a ``Bypass`` must return in a block's place: None for a tensor, the length of a tuple or list."""
    return len(output) if isinstance(output, (tuple, list)) else None


def bypass_modules(model: nn.Module, names: Sequence[str], arities: Sequence[int | None]) -> nn.Module:
    """``model`` with each named module replaced by a ``Bypass`` of the given arity (in place; returned)."""
    for name, arity in zip(names, arities):
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, Bypass(arity))  # ModuleList keys are "3"
    return model
