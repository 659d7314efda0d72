"""``laya train``: train a head on a backbone and write a checkpoint (the job: ``training.job.train``).

Every option but ``--quiet`` is a declared setting of ``TrainRequest`` (with its head, data and training
settings) or of ``LMSettings`` (runtime/config.py); ``with_settings`` makes the Typer options from them."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..runtime import progress
from ..runtime.config import LMSettings, TrainRequest
from .common import console, err_console, pick_device, refuse_device_map
from .declared import changed, with_settings
from .options import Quiet, Replace

# What ``--task lm`` reads of a TrainRequest (training/lm.py: lm_request); any other option set is refused.
LM_READS = frozenset(
    "backbone dataset text_column encoding batch_size epochs patience lr layers pretrained d_star tau "
    "score_hidden layer_dropout seed device out align align_target align_loss align_scope align_removal "
    "exit_aware reads".split()
)


@with_settings(req=TrainRequest, lm=LMSettings)
def train(quiet: Quiet = False, overwrite: Replace = False, *, req: TrainRequest, lm: LMSettings):
    """Train a head (LAYA or a baseline) on a backbone and write a checkpoint."""
    check_new_checkpoint(req, overwrite)
    req.data.seed, req.train.device = req.train.seed, pick_device(req.train.device)
    if lm.validate().is_lm:
        return train_language_model(lm_request(req, lm), quiet)
    refuse_device_map(lm.device_map)
    refuse_unread(lm, LMSettings, ("task",), "applies to --task lm only")
    from ..runtime.tracking.events import log_train
    from ..training.job import train as run_training
    from .command import current_run

    run = current_run()
    tracker = run.track(f"train {req.out}")
    with progress.enabled(not quiet):
        req.validate().command_line = run.record
        if req.trust_pickle:
            err_console.print("[bold yellow]warning:[/] --trust-pickle lets the weights file run code on this machine")
        ckpt = run_training(req, partial(on_epoch, tracker, quiet))
    log_train(tracker, ckpt, Path(req.out))
    m = ckpt["metrics"]
    console.print(
        f"[bold]test accuracy {m['test_accuracy']:.4f}  macro-F1 {m['test_macro_f1']:.4f}[/]  "
        f"(best epoch {m['best_epoch']} of {m['epochs_run']}) -> {req.out}",
        highlight=False,
    )


def check_new_checkpoint(req: TrainRequest, overwrite: bool) -> None:
    """``--out`` names a new file, or ``--overwrite`` says to replace it; ``--resume`` continues into it."""
    from ..runtime.fileio import check_new_outputs

    check_new_outputs({"--out": req.out}, overwrite or req.resume)


def refuse_unread(obj, use, reads, why: str) -> None:
    """One line naming the options set on ``obj`` that this path does not read (``reads``)."""
    from ..runtime.errors import LayaError

    unread = [d.flag for d in changed(obj, use) if d.name not in reads]
    if unread:
        raise LayaError(f"{', '.join(unread)} {why}")


def on_epoch(tracker, quiet: bool, r) -> None:
    """An epoch ended: log it to the tracker (``--log-to``) and, unless quiet, print it."""
    from ..runtime.tracking.events import log_epoch

    log_epoch(tracker, r)
    if not quiet:
        print_epoch(r)


def print_epoch(r) -> None:
    """One line per epoch (an ``EpochRecord``); the best so far is marked."""
    mark = " [green]*best[/]" if r.best else ""
    console.print(
        f"epoch {r.epoch:3d}  loss {r.loss:.4f}  train acc {r.train_accuracy:.4f}  "
        f"val acc {r.val_accuracy:.4f}"
        + ("" if r.val_faithfulness is None else f"  val faith {r.val_faithfulness:.4f}")
        + f"  {r.seconds:.1f}s{mark}",
        highlight=False,
    )


def train_language_model(req, quiet: bool):
    """``--task lm``: the LAYA head and the tuned lens at every position of a causal LM (training/lm.py)."""
    from ..report.lm import lm_layers_table
    from ..training.lm import train_lm
    from .command import current_run

    req.command_line = current_run().record
    with progress.enabled(not quiet):
        ckpt = train_lm(req, None if quiet else print_lm_epoch)
    console.print(lm_layers_table(ckpt["metrics"], ckpt["layers"]))
    laya = ckpt["metrics"]["heads"]["laya"]
    console.print(f"[bold]held-out laya: KL {laya['kl']:.4f} bits, CE {laya['ce']:.4f} bits per token[/] -> {req.out}")


def lm_request(req: TrainRequest, lm: LMSettings):
    """The ``--task lm`` training run of ``laya train`` and ``laya bench``: the options it reads, validated; any
    classifier option set is refused in one line (its value would be ignored)."""
    from ..runtime.config import split_csv
    from ..runtime.errors import LayaError
    from ..training.defaults import resolved_lm_head
    from ..training.lm import LMRequest

    if req.finetune:
        raise LayaError("--task lm trains heads on a frozen model: --finetune does not apply")
    refuse_unread(req, TrainRequest, LM_READS, "does not apply to --task lm (a language model's heads)")
    req.head_config.validate()
    align = _lm_alignment(req.train.validate())
    return LMRequest(
        backbone=req.backbone,
        dataset=req.data.name,
        out=Path(req.out),
        text_column=req.data.text_column,
        encoding=req.data.encoding,
        block_size=lm.block_size,
        batch_size=req.train.batch_size,
        epochs=req.train.epochs,
        patience=req.train.patience,
        lr=req.train.lr,
        objective=lm.objective,
        lens=lm.lens,
        lens_sample=lm.lens_sample,
        lens_tokens=lm.lens_tokens,
        eval_tokens=lm.eval_tokens,
        layer_dropout=req.train.layer_dropout,
        exit_aware=align.exit_aware,
        align=align.align,
        align_target=align.align_target,
        align_loss=align.align_loss,
        align_scope=align.align_scope,
        seed=req.train.seed,
        device=req.train.device,
        device_map=lm.device_map,
        layers=split_csv(req.layers),
        pretrained=req.pretrained is not False,
        head=resolved_lm_head(req.head_config),
    )


def _lm_alignment(train):
    """``--align``/``--align-target`` of ``--task lm`` resolved as for classifiers (``training.defaults``: a language
    model's default is λ 1 against the network target; a target given alone is λ 1); a language model's layers
    are removed by bypass."""
    from ..runtime.errors import LayaError
    from ..training.defaults import resolved_alignment

    resolved = resolved_alignment(train, "lm", False, "laya", pool="last")
    if train.align_removal not in ("auto", "bypass"):
        raise LayaError(f"--align-removal {train.align_removal}: a language model's layers are removed by bypass "
                        "(the default, auto, or bypass)")  # fmt: skip
    return resolved


def print_lm_epoch(r) -> None:
    mark = " [green]*best[/]" if r.best else ""
    console.print(
        f"epoch {r.epoch:3d}  loss {r.loss:.4f}  val KL {r.val_kl_bits:.4f} bits  val CE {r.val_ce_bits:.4f} bits  "
        f"{r.seconds:.1f}s{mark}",
        highlight=False,
    )
