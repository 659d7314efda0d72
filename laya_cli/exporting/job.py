"""The export job ``laya export`` runs on a classifier's checkpoint: its per-sample tables, class × layer profiles
and report.html (``folder.run_export``); a language model's per-token table, heat map and text explorer is
``lm.export_lm_checkpoint``'s. Which of the two runs is the checkpoint's task's choice (``tasks``), made once.
"""

from __future__ import annotations

from pathlib import Path

from ..data.settings import EvalDataSettings
from ..runtime.memory import MemoryRequest
from .folder import Export, run_export
from .settings import ExportSettings


def export_classifier_checkpoint(
    path,
    ckpt: dict,
    out: str | Path,
    settings: ExportSettings,
    data: EvalDataSettings,
    overwrite: bool = False,
    memory: MemoryRequest | None = None,
) -> Export:
    """Export the classifier's checkpoint ``ckpt`` (read from ``path``) to the folder ``out`` (written atomically;
    ``overwrite``: replace a previous export there) with ``settings`` resolved (its device picked:
    ``runtime.device.resolved``)."""
    return run_export(path, out, settings, data, overwrite, memory=memory, ckpt=ckpt)
