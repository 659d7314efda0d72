"""Experiment trackers (``--log-to``, ``LAYA_LOG_TO``; docs/integrations.md): ``base`` (``Tracker``, the few
calls a command makes, and the names metrics get), ``registry`` (``TRACKERS``: each tracker, the extra that
installs it, where its module is; ``open_tracker``), ``to_mlflow``, ``to_tensorboard`` and ``to_wandb`` (one per
tracker), ``events`` (what train, audit, depth, diff, export and bench log). Imports nothing heavy: a tracker's
library loads when it is opened."""

from .base import Tracker
from .registry import TRACKERS, open_tracker, parse_log_to

__all__ = ["TRACKERS", "Tracker", "open_tracker", "parse_log_to"]
