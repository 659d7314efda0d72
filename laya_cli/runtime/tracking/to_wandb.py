"""``--log-to wandb[:PROJECT]``: one Weights & Biases run per command, in PROJECT (default ``WANDB_PROJECT``, else
``laya``; ``WANDB_ENTITY`` picks the team). ``WANDB_MODE=offline`` keeps the run on disk under ``WANDB_DIR``
(default ``./wandb``) until ``wandb sync`` uploads it; online it needs ``WANDB_API_KEY`` or ``wandb login``. The
options are the run's config, metrics its history (``step`` where a command gives one: the epoch, the depth k),
tags go to its summary as text (``tags/<name>``) and the command to its tags, files are copied into the run's
folder (synced with it). wandb's console capture is off: laya's own output stays as it is."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .base import Tracker, finite

PROJECT = "laya"


class WandbTracker(Tracker):
    name = "wandb"

    def __init__(self, target: str | None = None):
        import wandb

        self.wandb = wandb
        self.project = target or os.environ.get("WANDB_PROJECT") or PROJECT
        self.run = None

    def check(self) -> None:
        """Offline (``WANDB_MODE=offline``): the folder the run is kept in can be written. Online there is nothing
        to check without a request of its own: wandb's login says it."""
        if os.environ.get("WANDB_MODE", "").strip().lower() in ("offline", "dryrun"):
            from ..fileio import check_folder_writable

            check_folder_writable(os.environ.get("WANDB_DIR") or ".", "the wandb folder (--log-to wandb)")

    def start(self, run_name: str, params: dict, tags: dict[str, str]) -> None:
        settings = self.wandb.Settings(console="off", silent=True)
        command = str(tags.get("laya.command") or run_name.split(" ")[0] or "laya")
        self.run = self.wandb.init(
            project=self.project, name=run_name, config=params, tags=[command], settings=settings, reinit="create_new"
        )
        self.tags(tags)

    def metrics(self, values: dict, step: int | None = None) -> None:
        found = finite(values)
        if found:
            self.run.log(found, step=step)

    def tags(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self.run.summary[f"tags/{key}"] = str(value)

    def artifact(self, path: str | Path) -> None:
        from ..fileio import atomic_path

        with atomic_path(Path(self.run.dir) / Path(path).name) as tmp:  # whole or absent (a full disk)
            shutil.copy2(path, tmp)

    def finish(self, status: str = "FINISHED") -> None:
        if self.run is not None:
            self.run.summary["tags/status"] = status
            self.run.finish(exit_code=0 if status == "FINISHED" else 1)
            self.where_text = self._where()
            self.run = None

    def _where(self) -> str:
        url = getattr(self.run, "url", None)
        return f"wandb run {self.run.id} " + (f"at {url}" if url else f"(offline) in {Path(self.run.dir).parent}")

    def where(self) -> str:
        return self._where() if self.run is not None else getattr(self, "where_text", "wandb")
