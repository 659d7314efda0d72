"""``--log-to tensorboard[:LOG_DIR]``: one TensorBoard run folder per command under LOG_DIR (default ``runs``),
``<command>-<date>-<time>-<id>``, written with torch's ``SummaryWriter``: metrics as scalars, the options as
hyper-parameters (the HPARAMS tab) and as text, tags as text, artifacts copied into ``artifacts/`` of the run.
``tensorboard --logdir runs`` shows them."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

from .base import Tracker, finite, flat_params

DEFAULT_DIR = "runs"


class TensorBoardTracker(Tracker):
    name = "tensorboard"

    def __init__(self, target: str | None = None):
        import tensorboard  # noqa: F401  (the extra: SummaryWriter needs it)

        self.root = Path(target or DEFAULT_DIR).expanduser()
        self.writer = None
        self.folder: Path | None = None

    def check(self) -> None:
        """The log folder can be made and written (not under a file, not read-only, not on a full disk)."""
        from ..fileio import check_folder_writable

        check_folder_writable(self.root, "the TensorBoard folder (--log-to tensorboard)")

    def start(self, run_name: str, params: dict, tags: dict[str, str]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        command = run_name.split()[0] if run_name else "laya"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.folder = self.root / f"{command}-{stamp}-{uuid.uuid4().hex[:6]}"
        self.writer = SummaryWriter(log_dir=str(self.folder))
        flat = flat_params(params)
        self._hparams(flat)
        self.writer.add_text("options", "\n".join(f"    {k} = {v}" for k, v in flat.items()))
        self.tags({"run": run_name, **tags})

    def _hparams(self, flat: dict[str, str]) -> None:
        """The options in TensorBoard's HPARAMS tab, in this run's own folder (``add_hparams`` makes another)."""
        from torch.utils.tensorboard.summary import hparams

        for summary in hparams(flat, {}):
            self.writer.file_writer.add_summary(summary)

    def metrics(self, values: dict, step: int | None = None) -> None:
        for key, value in finite(values).items():
            self.writer.add_scalar(key, value, global_step=step)

    def tags(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self.writer.add_text(f"tags/{key}", str(value))

    def artifact(self, path: str | Path) -> None:
        from ..fileio import atomic_path

        (self.folder / "artifacts").mkdir(parents=True, exist_ok=True)
        with atomic_path(self.folder / "artifacts" / Path(path).name) as tmp:  # whole or absent (a full disk)
            shutil.copy2(path, tmp)

    def finish(self, status: str = "FINISHED") -> None:
        if self.writer is not None:
            self.writer.add_text("tags/status", status)
            self.writer.close()
            self.writer = None

    def where(self) -> str:
        return f"tensorboard run {self.folder}"
