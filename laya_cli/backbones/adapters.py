"""What a tapped model is fed: ``InputAdapter`` turns [0, 1] images into the model's input (size, channels,
normalisation), ``TokenAdapter`` a B×2×L token batch into a text model's keyword inputs and keeps its attention
mask for pooling; ``random_tokens`` makes a probe batch for text models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..runtime.errors import LayaError
from .spec import InputConfig, TextInput


class InputAdapter(nn.Module):
    """Turns [0, 1] image batches into what the backbone expects (channels, size, norm)."""

    def __init__(self, cfg: InputConfig):
        super().__init__()
        self.channels, self.size = cfg.channels, cfg.size
        self.register_buffer("mean", torch.tensor(cfg.mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 3 and not x.is_floating_point():
            raise LayaError(
                "this is an image model: it takes B×C×H×W images, not B×2×L token batches "
                "(text given to an image model?)"
            )
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1) if x.shape[1] == 1 else x.mean(1, keepdim=True)
        if self.size is not None and tuple(x.shape[-2:]) != tuple(self.size):
            x = F.interpolate(x, size=self.size, mode="bilinear", antialias=True, align_corners=False)
        return (x - self.mean) / self.std

    def record(self) -> dict:
        """What the checkpoint stores as the backbone's ``input``."""
        return {
            "channels": self.channels,
            "size": list(self.size or []),
            "mean": self.mean.flatten().tolist(),
            "std": self.std.flatten().tolist(),
        }

    def batch_mask(self, h: Tensor) -> None:
        return None

    pool_mask = batch_mask

    def select_rows(self, rows: Tensor) -> Callable[[], None]:
        return lambda: None  # images carry no per-batch state


class TokenAdapter(nn.Module):
    """Turns B×2×L token batches (ids, attention mask) into a text model's keyword inputs, and keeps the
    mask of the batch it last saw: pooling a tap of that batch (or of Captum's copies of it, stacked
    along the batch) reads it, so padding never enters r_i.

    Texts are stored padded to ``max_length``; each batch reaches the model cut after its last real token
    (``trim``), so a batch costs what its longest text needs. The real tokens' outputs do not change: padding
    is masked out of every real token's attention (tests/test_text.py)."""

    def __init__(self, cfg: TextInput):
        super().__init__()
        self.text = cfg
        self.channels, self.size = 2, None
        self.mask: Tensor | None = None
        self.trim = True  # False: every batch at max_length (the network scope's per-position reference)
        self._pool_masks: tuple[Tensor | None, dict] = (None, {})  # ``pool_mask``'s, for the mask they came from

    def forward(self, x: Tensor) -> dict:
        if x.ndim != 3 or x.shape[1] != 2 or x.is_floating_point():
            shape = "×".join(str(s) for s in x.shape)
            raise LayaError(
                f"this is a text model: it takes B×2×L token batches (ids, attention mask), not a {shape} "
                f"{x.dtype} tensor (images given to a text model?)"
            )
        ids, mask = x[:, 0].long(), x[:, 1].long()
        if self.trim and mask.shape[1] > 1:
            real = mask.any(0).nonzero()
            length = int(real.max()) + 1 if len(real) else 1
            ids, mask = ids[:, :length], mask[:, :length]
        self.mask = mask
        return {"input_ids": ids, "attention_mask": mask}

    def record(self) -> dict:
        return {"kind": "tokens", **asdict(self.text)}

    def select_rows(self, rows: Tensor) -> Callable[[], None]:
        """Keep the mask of only ``rows`` of the last batch (IG refining some of its samples); returns the undo."""
        saved = self.mask
        if saved is not None:
            self.mask = saved[rows.to(saved.device)]
        return lambda: setattr(self, "mask", saved)

    def batch_mask(self, h: Tensor) -> Tensor | None:
        """The mask of ``h``'s rows: the last batch's, repeated when Captum stacked copies of it (or its first
        rows when the last batch was such copies and ``h`` is one of them)."""
        if self.mask is None or h.ndim != 3 or h.shape[1] != self.mask.shape[1]:
            return None
        mask, rows = self.mask, len(h)
        if (
            len(mask) > rows
            and len(mask) % rows == 0
            and torch.equal(mask, stack_copies(mask[:rows], len(mask) // rows))
        ):
            mask = mask[:rows]
        copies, rest = divmod(rows, len(mask))
        if rest or not copies:
            raise LayaError(f"a batch of {rows} rows cannot be pooled with the mask of {len(mask)} texts")
        return stack_copies(mask, copies).to(h.device)

    def pool_mask(self, h: Tensor) -> Tensor | None:
        """``batch_mask(h)`` in ``h``'s dtype, as pooling reads it (``pooling.masked_pool`` casts it so): made once per
        batch and shape of rows, not repeated and cast again at every pooling (a pass pools L taps, a staircase step
        pools (j + 1)·B rows, all with the same mask). The same values: ``batch_mask`` then the same cast."""
        if self._pool_masks[0] is not self.mask:  # a new batch, or the rows of one (``select_rows``)
            self._pool_masks = (self.mask, {})
        made, key = self._pool_masks[1], (h.ndim, *h.shape[:2], h.dtype, h.device)
        if key not in made:
            mask = self.batch_mask(h)
            made[key] = None if mask is None else mask.to(h.dtype)
        return made[key]


def stack_copies(t: Tensor, copies: int) -> Tensor:
    """``copies`` copies of a batch stacked along the batch dimension, as Captum expands a batch for its steps."""
    return t.repeat(copies, *[1] * (t.ndim - 1))


def make_adapter(cfg: InputConfig | TextInput) -> InputAdapter | TokenAdapter:
    return TokenAdapter(cfg) if isinstance(cfg, TextInput) else InputAdapter(cfg)


def random_tokens(cfg: TextInput, batch: int, length: int = 16) -> Tensor:
    """A seeded batch of random token ids (a probe input); the last text is padded after half its tokens, so
    that what is checked on a probe sees an attention mask at work."""
    g = torch.Generator().manual_seed(0)
    length = min(length, cfg.max_length)
    ids = torch.randint(0, max(cfg.vocab_size, 2), (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1 and length > 1:
        mask[-1, (length + 1) // 2 :] = 0
        ids[-1, (length + 1) // 2 :] = cfg.pad_id
    return torch.stack([ids, mask], dim=1)
