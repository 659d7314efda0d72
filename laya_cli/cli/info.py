"""``laya info``: what a checkpoint holds, as a panel or as JSON."""

from __future__ import annotations

import json
import sys

from ..runtime.errors import LayaError
from .common import console, note, warn
from .options import InfoJson, ModelPath, OptionsToml


def info(model: ModelPath, as_json: InfoJson = False, options_toml: OptionsToml = False):
    """Show what a checkpoint holds: backbone, layers, head, classes and test metrics."""
    from ..auditing.flags import checkpoint_findings
    from ..model.checkpoint import checkpoint_summary, read_checkpoint
    from ..report.info import info_panel

    ckpt = read_checkpoint(model)
    summary = {**checkpoint_summary(ckpt), **checkpoint_findings(ckpt)}
    if options_toml:
        from .config_file import options_toml as to_toml

        if not summary.get("options"):
            raise LayaError(f"{model} records no command-line options (it was not written by laya train)")
        sys.stdout.write(to_toml(summary["options"], str(model)))
        return
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    if summary["task"] == "lm":
        from ..report.lm import lm_info_panel

        console.print(lm_info_panel(summary, model))
        say_findings(summary)
        return
    console.print(info_panel(summary, model))
    say_findings(summary)
    for text in summary["warnings"]:
        warn(text)
    collapse = summary["metrics"].get("alpha_collapse")
    if collapse and collapse["collapsed"]:  # what it means and what to try, as the audit warns
        from ..auditing.collapse import collapse_warning

        (note if collapse.get("finding") else warn)(collapse_warning(collapse, summary["layers"]))


def say_findings(summary: dict) -> None:
    """The question α was trained on, in one sentence, and each flag the checkpoint's own metrics earn."""
    console.print(f"question: {summary['question']['sentence']}.", highlight=False, soft_wrap=True, markup=False)
    for text in summary["flags"]:
        console.print(text, highlight=False, soft_wrap=True, markup=False)
