"""The trackers ``--log-to`` knows, by name: the package each needs, the extra that installs it, the class.

``--log-to NAME[:TARGET]`` (or ``LAYA_LOG_TO``): ``mlflow`` (TARGET: a tracking URI; default: MLflow's own,
``MLFLOW_TRACKING_URI`` or its default store), ``tensorboard`` (TARGET: the log folder; default ``runs``) or
``wandb`` (TARGET: the project; default ``WANDB_PROJECT`` or ``laya``; ``WANDB_MODE=offline`` stays on disk). A
tracker whose package is missing is one line naming the pip command (exit 2), before any work is done.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from ..errors import LayaError, match_choice
from .base import Tracker


@dataclass(frozen=True)
class TrackerEntry:
    module: str  # laya_cli.runtime.tracking.<module>
    cls: str
    package: str  # the import name that must be there
    extra: str  # pip install 'laya-audit[<extra>]'


TRACKERS = {
    "mlflow": TrackerEntry("to_mlflow", "MlflowTracker", "mlflow", "mlflow"),
    "tensorboard": TrackerEntry("to_tensorboard", "TensorBoardTracker", "tensorboard", "tensorboard"),
    "wandb": TrackerEntry("to_wandb", "WandbTracker", "wandb", "wandb"),
}
NONE = ("", "none", "off", "0", "false")


def parse_log_to(spec: str | None) -> tuple[str, str | None] | None:
    """``NAME[:TARGET]`` -> (name, target or None); None for no tracker."""
    if spec is None or spec.strip().lower() in NONE:
        return None
    name, _, target = spec.strip().partition(":")
    return match_choice("--log-to", name, tuple(TRACKERS)), (target or None)


def check_log_to(spec: str | None) -> tuple[str, str | None] | None:
    """``parse_log_to``, and the tracker's package is installed: else a ``LayaError`` naming the pip command.
    Imports nothing (the command line checks this while parsing its options)."""
    parsed = parse_log_to(spec)
    if parsed is not None:
        entry = TRACKERS[parsed[0]]
        if importlib.util.find_spec(entry.package) is None:
            raise LayaError(
                f"--log-to {parsed[0]} needs the {entry.package} package: pip install 'laya-audit[{entry.extra}]'"
            )
    return parsed


def open_tracker(spec: str | None) -> Tracker:
    """The tracker ``spec`` names (not started), or the do-nothing ``Tracker``; a missing package is a
    ``LayaError`` naming the pip command."""
    parsed = check_log_to(spec)
    if parsed is None:
        return Tracker()
    name, target = parsed
    entry = TRACKERS[name]
    module = importlib.import_module(f"{__package__}.{entry.module}")
    return getattr(module, entry.cls)(target)
