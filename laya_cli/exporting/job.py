"""The export job ``laya export`` runs on a checkpoint file, whichever its task: a classifier's per-sample tables,
class × layer profiles and report.html (``folder.run_export``), a language model's per-token table, heat map and
text explorer (``lm.run_token_export``). The settings of the other task are refused in one line first.
"""

from __future__ import annotations

from pathlib import Path

from ..data.settings import EvalRequest
from ..model.checkpoint import checkpoint_task, read_checkpoint
from ..model.lm_heads import lm_from_checkpoint
from ..model.settings import LoadSettings
from ..runtime.declare import refuse_other_task
from ..runtime.memory import MemoryRequest
from .folder import Export, run_export
from .lm import TokenExport, default_token_format, run_token_export
from .settings import ExportSettings


def export_checkpoint(
    path,
    out: str | Path,
    settings: ExportSettings,
    data: EvalRequest,
    load: LoadSettings,
    overwrite: bool = False,
    memory: MemoryRequest | None = None,
) -> Export | TokenExport:
    """Export the checkpoint at ``path`` to the folder ``out`` (written atomically; ``overwrite``: replace a
    previous export there) with ``settings`` resolved (its device picked: ``runtime.device.resolved``)."""
    ckpt = read_checkpoint(path)
    task = checkpoint_task(ckpt)
    for given in (settings, data, load):
        refuse_other_task(given, task)
    if task == "lm":
        model = lm_from_checkpoint(ckpt, load.device_map).to(settings.device)
        fmt, info = settings.format or default_token_format(), {"checkpoint": str(path)}
        return run_token_export(model, out, fmt, settings.plots, data.dataset, data.samples, overwrite, info,
                                data.encoding)  # fmt: skip
    return run_export(path, out, settings, data, overwrite, memory=memory, ckpt=ckpt)
