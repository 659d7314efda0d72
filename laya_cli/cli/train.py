"""``laya train``: train a head on a backbone and write a checkpoint (the job: ``training.job.train``).

Every option but ``--quiet`` and ``--overwrite`` is a declared setting of ``TrainJobSettings`` (with its head, data,
training and language-model settings: training/settings.py); ``with_settings`` makes the Typer options from them.
The task (``--task``) is one of those settings: the job trains a classifier's head or a language model's."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..runtime import progress
from ..runtime.declare import evolve
from ..training.settings import TrainJobSettings
from .common import console, err_console
from .declared import with_settings
from .options import Quiet, Replace


@with_settings(req=TrainJobSettings)
def train(quiet: Quiet = False, overwrite: Replace = False, *, req: TrainJobSettings):
    """Train a head (LAYA or a baseline) on a backbone and write a checkpoint."""
    from ..exporting.tasks import train as run_training
    from ..runtime.device import resolved
    from ..runtime.tracking.events import log_train
    from .command import current_run

    check_new_checkpoint(req, overwrite)
    run = current_run()
    # the run's seed draws the split too; the device picked; the command line recorded: a new request
    data, train = evolve(req.data, seed=req.train.seed), resolved(req.train)
    req = evolve(req, data=data, train=train, command_line=run.record)
    tracker = run.track(f"train {req.out}", before_work=True)
    with progress.enabled(not quiet):
        req.validate()
        if req.trust_pickle:
            err_console.print("[bold yellow]warning:[/] --trust-pickle lets the weights file run code on this machine")
        ckpt = run_training(req, partial(on_epoch, tracker, quiet))
    log_train(tracker, ckpt, Path(req.out))
    print_trained(ckpt, req.out)


def check_new_checkpoint(req: TrainJobSettings, overwrite: bool) -> None:
    """``--out`` names a new file, or ``--overwrite`` says to replace it; ``--resume`` continues into it."""
    from ..runtime.fileio import check_new_outputs

    check_new_outputs({"--out": req.out}, overwrite or req.resume)


def on_epoch(tracker, quiet: bool, r) -> None:
    """An epoch ended: log it to the tracker (``--log-to``) and, unless quiet, print it."""
    from ..report.train import epoch_line
    from ..runtime.tracking.events import log_epoch

    log_epoch(tracker, r)
    if not quiet:
        console.print(epoch_line(r), highlight=False)


def print_trained(ckpt: dict, out) -> None:
    """What the run measured on held-out data, and where the checkpoint went."""
    from ..auditing.flags import checkpoint_flags
    from ..report.train import trained_lines

    for line in trained_lines(ckpt, out):
        console.print(line, highlight=False)
    for line in checkpoint_flags(ckpt.get("metrics"), len(ckpt.get("classes") or [])):  # results that say nothing
        console.print(line, highlight=False, soft_wrap=True, markup=False)
