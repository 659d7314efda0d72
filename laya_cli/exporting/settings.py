"""``laya export``'s settings: the files an export writes and what it attaches (an audit, a depth analysis, a model
card). Declared once (``runtime.declare.setting``); no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..runtime.declare import COUNT_MAX, SEED_MAX, Settings, setting
from ..runtime.environment import device_setting

FORMATS = ("csv", "parquet", "npz")


@dataclass(frozen=True)
class ExportSettings(Settings):
    PANEL: ClassVar[str] = "Export"

    format: str | None = setting(
        None,
        "Per-sample table format: csv (default), parquet (needs pyarrow) or npz; a language model's per-token "
        "table: parquet (default where pyarrow is installed) or csv.",
        choices=FORMATS,
    )
    plots: bool = setting(True, "Draw the PNG figures (report.html is written either way).", flag="--plots/--no-plots")
    strip: int = setting(
        8,
        "How many samples the image strip shows (0 = no strip).",
        metavar="K",
        minimum=0,
        task="classify",
        maximum=COUNT_MAX,
    )
    seed: int = setting(0, "Seed of the --samples subset.", minimum=0, task="classify", maximum=SEED_MAX)
    audit: str | None = setting(
        None,
        "A 'laya audit --json' of this model: adds the audit section to report.html (copied into the export as "
        "audit.json).",
        metavar="FILE",
        task="classify",
    )
    depth: str | None = setting(
        None,
        "A 'laya depth --json' result to add to report.html (default: MODEL.depth.json beside the checkpoint, if "
        "there).",
        metavar="FILE",
        task="classify",
    )
    model_card: bool = setting(
        False,
        "Also write README.md: a Hugging Face model card (model-index with the accuracy and, with --audit, the "
        "audit's metrics; the audit table, the class × layer picture, how it was produced).",
        flag="--model-card",
        task="classify",
    )
    device: str = device_setting(panel="Run")
