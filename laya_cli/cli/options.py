"""The command-line options that belong to the command line rather than to a setting of a job: the checkpoint
read, where outputs go and whether they may replace a file, and how results are shown (the gates and ``laya audit``'s
outputs are declared in ``gates/settings.py``).

The settings of a job are declared once by the stage that owns them (``model/settings.py``, ``data/settings.py``,
``training/settings.py``, ``auditing/settings.py``, ``depthing/settings.py``, ``exporting/settings.py``, the
environment's in ``runtime/environment.py``) and become Typer options through ``cli/declared.py``. No torch here:
the CLI must start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..gates.settings import AuditOutputs
from ..runtime.declare import help_of

# --------------------------------------------------------------------------- every command

Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines.")]
ModelPath = Annotated[Path, typer.Argument(help="A laya checkpoint (model.pt).")]
# The same words as laya audit's declared outputs (gates/settings.py: AuditOutputs), written once there.
JsonOut = Annotated[Path | None, typer.Option("--json", help=help_of(AuditOutputs, "json_out"))]
MarkdownOut = Annotated[Path | None, typer.Option(help=help_of(AuditOutputs, "markdown"))]


# --------------------------------------------------------------------------- what is written

Replace = Annotated[bool, typer.Option("--overwrite", help=help_of(AuditOutputs, "overwrite"))]
TruncateOut = Annotated[
    Path | None, typer.Option("--out", help="Where --truncate or --drop writes the smaller checkpoint.")
]
PlotOut = Annotated[
    Path | None,
    typer.Option("--plot", help="Draw accuracy vs backbone compute (truncation, refit, early exit) to this PNG."),
]


# --------------------------------------------------------------------------- export: what is written and shown

ExportOut = Annotated[
    Path,
    typer.Option("--out", metavar="DIR", help="Folder to write (created). A non-empty folder needs --overwrite."),
]
Overwrite = Annotated[
    bool, typer.Option(help="Replace --out if it holds a previous laya export (never any other folder).")
]
ExportQuiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables; only errors and notes.")]

# --------------------------------------------------------------------------- info

InfoJson = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a panel.")]
OptionsToml = Annotated[
    bool,
    typer.Option(
        "--options-toml",
        help="Print the options the checkpoint was trained with as a TOML file: 'laya train --config FILE' "
        "reruns the training.",
    ),
]

# --------------------------------------------------------------------------- the command line itself


def _show_version(value: bool) -> None:
    from .version_and_color import show_version

    show_version(value)


Version = Annotated[
    bool,
    typer.Option(
        "--version",
        is_eager=True,
        callback=_show_version,
        help="Print the versions of laya, torch, timm, captum (and transformers, when installed) and exit.",
    ),
]
NoColor = Annotated[
    bool, typer.Option("--no-color", help="No colour in the output (as the NO_COLOR environment variable does).")
]


def _remember(ctx: typer.Context, param: typer.CallbackParam, value):
    """An option the command's function does not take (``command.shared_params``): kept in ``ctx.meta``."""
    ctx.meta[f"laya.{param.name}"] = value
    return value


def _check_log_to(ctx: typer.Context, param: typer.CallbackParam, value: str | None):
    """``--log-to``: a known tracker whose package is installed (else exit 2 before any work), kept in ctx.meta."""
    from ..runtime.tracking.registry import check_log_to

    check_log_to(value)
    return _remember(ctx, param, value)


Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", callback=_remember, help="Also print the resolved options (defaults, --config file, flags)."
    ),
]


def _load_config(ctx: typer.Context, param: typer.CallbackParam, value: Path | None):
    from .config_file import load_config

    return load_config(ctx, param, value)


Config = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        is_eager=True,
        callback=_load_config,
        help="Read options from a TOML file (top-level keys and/or a table named after the command; keys are the "
        "long option names). Flags given on the command line override the file (docs/integrations.md).",
    ),
]
LogTo = Annotated[
    str | None,
    typer.Option(
        "--log-to",
        envvar="LAYA_LOG_TO",
        metavar="TRACKER[:TARGET]",
        callback=_check_log_to,
        help="Also log the run to an experiment tracker: mlflow[:TRACKING_URI], tensorboard[:LOG_DIR] or "
        "wandb[:PROJECT] (needs pip install 'laya-audit[mlflow]', '[tensorboard]' or '[wandb]'; "
        "docs/integrations.md). Env: LAYA_LOG_TO.",
    ),
]
