"""``laya info``: what a checkpoint holds, as a panel or as JSON."""

from __future__ import annotations

import json
import sys

from .common import console
from .options import InfoJson, ModelPath


def info(model: ModelPath, as_json: InfoJson = False):
    """Show what a checkpoint holds: backbone, layers, head, classes and test metrics."""
    from ..model.checkpoint import checkpoint_summary, read_checkpoint
    from ..report.info import info_panel

    summary = checkpoint_summary(read_checkpoint(model))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    console.print(info_panel(summary, model))
