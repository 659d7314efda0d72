"""``laya depth``'s settings: the truncation curve, early exit, a truncated or thinned checkpoint (docs/depth.md).
Declared once (``runtime.declare.setting``); no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..runtime.declare import (
    COUNT_MAX,
    SEED_MAX,
    STEPS_MAX,
    WIDTH_MAX,
    Settings,
    check_fields,
    check_unit_interval,
    normalise,
    setting,
)
from ..runtime.environment import device_setting
from ..runtime.errors import LayaError

# Default thresholds of the early-exit sweep (docs/depth.md): a sample stops at the first depth k whose
# truncated prediction has p_max > t (or whose layers ≤ k hold α mass > t); t = 1 never stops early.
EXIT_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0)
# A language model's (docs/lm.md): its next-token distribution is flatter than a classifier's
TOKEN_THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99, 0.995, 0.999, 1.0)
DEFAULT_THRESHOLDS = {"classify": EXIT_THRESHOLDS, "lm": TOKEN_THRESHOLDS}  # per task (``thresholds_for``)


DROP_ORDERS = ("alpha", "block-influence", "network", "reverse", "greedy")  # laya depth --drop: which layers go first


@dataclass(frozen=True)
class DepthSettings(Settings):
    """``laya depth``: truncation curve, early exit, a truncated checkpoint (docs/depth.md)."""

    PANEL: ClassVar[str] = "Depth"

    batch_size: int = setting(
        256,
        "Samples per evaluated batch (default: 256, fewer when --max-memory needs it).",
        minimum=1,
        command_default=None,  # the command line's None: planned within --max-memory,
        panel="Run",
        maximum=COUNT_MAX,
    )  # samples per head pass
    seed: int = setting(0, "Seed of the --samples subset.", minimum=0, task="classify", maximum=SEED_MAX)
    refit: bool = setting(
        False,
        "Also retrain a head on the taps ≤ k for each k (any head kind; the checkpoint's training "
        "settings, on its training data).",
        flag="--refit",
        task="classify",
    )
    refit_epochs: int | None = setting(
        None,
        "Maximum epochs of each --refit head (default: the checkpoint's own).",
        minimum=1,
        task="classify",
        maximum=STEPS_MAX,
    )
    thresholds: tuple[float, ...] | None = setting(
        None,
        "Early-exit thresholds in (0, 1], comma list (default: 0.5 … 0.999, 1; a language model's 0.3 … 0.999, 1).",
        cli_type=str | None,
    )  # None: the task's default (thresholds_for)
    time_repeats: int = setting(
        5,
        "Timed rounds per depth (their median is reported with its interval); 0 = count FLOPs only.",
        minimum=0,
        task="classify",
        maximum=STEPS_MAX,
    )  # timed passes per depth
    time_batch: int = setting(32, "Images per timed backbone pass.", minimum=1, task="classify", maximum=COUNT_MAX)
    truncate: int | None = setting(
        None,
        "Write a checkpoint whose backbone stops after tap K (1..L) to --out.",
        metavar="K",
        task="classify",
        maximum=WIDTH_MAX,
    )  # K: write a checkpoint cut after tap K
    drop: int | None = setting(
        None,
        "Drop up to K interior layers (bypassed: output := input) in each order and score the test accuracy; "
        "with --out, write the model without the first K layers of --drop-order.",
        metavar="K",
        minimum=1,
        task="classify",
        maximum=WIDTH_MAX,
    )
    drop_order: str = setting(
        "alpha",
        "Which order --drop K --out follows, least important first: alpha, block-influence, network, reverse "
        "(the deepest first) or greedy.",
        choices=DROP_ORDERS,
        task="classify",
    )
    drop_draws: int = setting(
        3, "Seeded random orders in the --drop table.", param="draws", minimum=0, task="classify", maximum=STEPS_MAX
    )
    device: str = device_setting(panel="Run")

    def thresholds_for(self, task: str) -> tuple[float, ...]:
        """The thresholds given, or the task's default (a classifier's, or a language model's per token)."""
        if self.thresholds is not None:
            return self.thresholds
        return DEFAULT_THRESHOLDS[task]

    def validate(self) -> DepthSettings:
        if self.thresholds is not None:
            normalise(self, thresholds=check_unit_interval("--thresholds", self.thresholds))
        check_fields(self)
        if self.drop is not None and (self.truncate is not None or self.refit):
            raise LayaError("--drop analyses dropped layers on its own: run it without --truncate and --refit")
        return self
