"""The model's settings: the head's (``HeadSettings``, recorded in the checkpoint) and how a checkpoint's model is
loaded (``LoadSettings``: ``--arch``, ``--device-map``). Declared once (``runtime.declare.setting``); no torch.

The head's defaults are the paper's (docs/metrics.md): d* = 96, τ = 1.5, ψ = identity, score_hidden = 192.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from ..backbones.defaults import term_for
from ..runtime.declare import WIDTH_MAX, Settings, setting
from ..runtime.errors import LayaError

PSI_CHOICES = ("identity", "mlp")
ALPHA_READERS = ("pooled", "positions")  # what the LAYA head's scorer reads of each layer (model/heads.py)
READS = ("states", "updates")  # what a language model's LAYA head weighs of each layer (model/lm_heads.py LayaLMHead)


@dataclass(frozen=True)
class HeadSettings(Settings):
    PANEL: ClassVar[str] = "Head"

    d_star: int = setting(96, "Adapter width d*.", flag="--d-star", above=0, maximum=WIDTH_MAX)
    tau: float = setting(1.5, "Softmax temperature of the attention (fixed).", above=0)
    psi: str = setting(
        "identity", "Shared transform ψ before scoring: identity or mlp.", choices=PSI_CHOICES, task="classify"
    )
    score_hidden: int = setting(192, "Hidden width of the scoring MLP.", above=0, maximum=WIDTH_MAX)
    layer_norm: bool = setting(
        False,
        "Normalise every layer's r_i (LayerNorm without affine) before the head's adapters, so each layer "
        "reaches the head at the same scale (docs/results/collapse.md).",
        flag="--layer-norm/--no-layer-norm",
        task="classify",
    )
    alpha_reader: str = setting(
        "pooled",
        "What the laya head's scorer reads of each layer to compute α: the pooled r_i (pooled), or also the tap's "
        "positions (tokens, or a CNN's map at most 8×8) through an attention pooling of its own per layer "
        "(positions); the prediction still sums the pooled, adapted r_i (docs/backbones.md, Positions for α's reader).",
        flag="--alpha-reader",
        choices=ALPHA_READERS,
        task="classify",
    )
    reads: str | None = setting(
        None,
        "What the head weighs of each layer: its state h_i (states), or the update its block added to the "
        "residual stream, h_i − h_{i−1} (updates; h_1 as it is): α then weighs what removing a block removes, and α "
        f"uniform reads the model's own last state. Default: {term_for('lm', False).reads} (docs/lm.md).",
        choices=READS,
        task="lm",
        panel="Language models (--task lm)",
    )

    LATER = {"layer_norm": False, "reads": None, "alpha_reader": "pooled"}  # as DataSettings.LATER

    def to_dict(self) -> dict:
        """As the checkpoint records it: the options added later only when set (a default run's config is what it
        was before them; ``HeadSettings(**d)`` gives their defaults back)."""
        return {k: v for k, v in asdict(self).items() if not (k in self.LATER and v == self.LATER[k])}


def check_alpha_reader(reader: str, head: str) -> None:
    """``--alpha-reader`` other than pooled is the LAYA head's scorer (input-conditioned α); one line otherwise."""
    if reader != "pooled" and head.lower() != "laya":
        raise LayaError(
            f"--alpha-reader {reader} is the scorer of input-conditioned attention α: --head laya (not {head})"
        )


def device_map_setting():
    """``--device-map``: where a language model's layers go, at training and whenever its checkpoint is loaded."""
    return setting(
        None,
        "A language model: transformers places the frozen model over the devices (auto, balanced, "
        "balanced_low_0, sequential; needs accelerate), for a model larger than one device; the heads sit with its "
        "readout (docs/lm.md).",
        metavar="MAP",
        task="lm",
    )


@dataclass(frozen=True)
class LoadSettings(Settings):
    """How a checkpoint's model is rebuilt (``laya audit``, ``depth``, ``export``, ``diff``)."""

    PANEL: ClassVar[str] = "Checkpoint"

    arch: str | None = setting(
        None,
        "Import this architecture (module:callable or file.py:callable) for a checkpoint trained with --arch.",
    )
    device_map: str | None = device_map_setting()
