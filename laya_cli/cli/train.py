"""``laya train``: train a head on a backbone and write a checkpoint (the job: ``training.job.train``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..runtime import progress
from .common import console, err_console, pick_device, refuse_device_map
from .options import (
    HEAD,
    JOB,
    TRAIN,
    Align,
    AlignScope,
    AlphaEntropy,
    AlphaEntropySchedule,
    Arch,
    BlockSize,
    CheckpointOut,
    Device,
    DeviceMap,
    EvalTokens,
    Head,
    InputSize,
    JobOptions,
    LayerDropout,
    LayerNorm,
    Objective,
    Precision,
    Quiet,
    Restart,
    Resume,
    Seed,
    StopOn,
    Task,
    TauStart,
    split_csv,
    train_request,
    with_job_options,
)


@with_job_options
def train(
    job: JobOptions,
    head: Head = JOB.head,
    out: CheckpointOut = Path(JOB.out),
    align: Align = TRAIN.align,
    align_scope: AlignScope = TRAIN.align_scope,
    stop_on: StopOn = TRAIN.stop_on,
    layer_norm: LayerNorm = HEAD.layer_norm,
    layer_dropout: LayerDropout = TRAIN.layer_dropout,
    alpha_entropy: AlphaEntropy = TRAIN.alpha_entropy,
    alpha_entropy_schedule: AlphaEntropySchedule = TRAIN.alpha_entropy_schedule,
    tau_start: TauStart = TRAIN.tau_start,
    seed: Seed = TRAIN.seed,
    arch: Arch = JOB.arch,
    input_size: InputSize = JOB.input_size,
    resume: Resume = JOB.resume,
    restart: Restart = JOB.restart,
    device: Device = "auto",
    quiet: Quiet = False,
    precision: Precision = TRAIN.precision,
    task: Task = "classify",
    objective: Objective = "kl",
    block_size: BlockSize = None,
    eval_tokens: EvalTokens = 20_000,
    device_map: DeviceMap = None,
):
    """Train a head (LAYA or a baseline) on a backbone and write a checkpoint."""
    from ..runtime.errors import match_choice

    if match_choice("--task", task, ("classify", "lm")) == "lm":
        return train_language_model(
            job, task, out, objective, block_size, eval_tokens, layer_dropout, seed, device, quiet, device_map
        )
    refuse_device_map(device_map)
    from ..runtime.tracking.events import log_train
    from ..training.job import train as run_training
    from .command import current_run

    run = current_run()
    tracker = run.track(f"train {out}")
    with progress.enabled(not quiet):
        req = train_request(
            job,
            head=head,
            out=out,
            seed=seed,
            resume=resume,
            restart=restart,
            device=pick_device(device),
            arch=arch,
            input_size=input_size,
            align=align,
            align_scope=align_scope,
            stop_on=stop_on,
            precision=precision,
            layer_norm=layer_norm,
            layer_dropout=layer_dropout,
            alpha_entropy=alpha_entropy,
            alpha_entropy_schedule=alpha_entropy_schedule,
            tau_start=tau_start,
        )
        req.command_line = run.record
        if job.trust_pickle:
            err_console.print("[bold yellow]warning:[/] --trust-pickle lets the weights file run code on this machine")
        ckpt = run_training(req, partial(on_epoch, tracker, quiet))
    log_train(tracker, ckpt, out)
    m = ckpt["metrics"]
    console.print(
        f"[bold]test accuracy {m['test_accuracy']:.4f}  macro-F1 {m['test_macro_f1']:.4f}[/]  "
        f"(best epoch {m['best_epoch']} of {m['epochs_run']}) -> {out}",
        highlight=False,
    )


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


def train_language_model(
    job: JobOptions, task, out, objective, block_size, eval_tokens, layer_dropout, seed, device, quiet, device_map
):
    """``--task lm``: the LAYA head and the tuned lens at every position of a causal LM (training/lm.py)."""
    from ..report.lm import lm_layers_table
    from ..training.lm import train_lm
    from .command import current_run

    req = lm_request(job, out, objective, block_size, eval_tokens, layer_dropout, seed, pick_device(device), device_map)
    req.command_line = current_run().record
    with progress.enabled(not quiet):
        ckpt = train_lm(req, None if quiet else print_lm_epoch)
    console.print(lm_layers_table(ckpt["metrics"], ckpt["layers"]))
    laya = ckpt["metrics"]["heads"]["laya"]
    console.print(f"[bold]held-out laya: KL {laya['kl']:.4f} bits, CE {laya['ce']:.4f} bits per token[/] -> {out}")


def lm_request(job: JobOptions, out, objective, block_size, eval_tokens, layer_dropout, seed, device, device_map=None):
    """The ``--task lm`` training run the shared options describe (``laya train`` and ``laya bench``)."""
    from ..runtime.config import HeadConfig
    from ..runtime.errors import LayaError
    from ..training.lm import LMRequest

    if job.finetune:
        raise LayaError("--task lm trains heads on a frozen model: --finetune does not apply")
    return LMRequest(
        backbone=job.backbone,
        dataset=job.dataset,
        out=Path(out),
        text_column=job.text_column,
        encoding=job.encoding,
        block_size=block_size,
        batch_size=job.batch_size,
        epochs=job.epochs,
        patience=job.patience,
        lr=job.lr,
        objective=objective,
        eval_tokens=eval_tokens,
        layer_dropout=layer_dropout,
        seed=seed,
        device=device,
        device_map=device_map,
        layers=split_csv(job.layers),
        pretrained=job.pretrained is not False,
        head=HeadConfig(d_star=job.d_star, tau=job.tau, score_hidden=job.score_hidden),
    )


def print_lm_epoch(r) -> None:
    mark = " [green]*best[/]" if r.best else ""
    console.print(
        f"epoch {r.epoch:3d}  loss {r.loss:.4f}  val KL {r.val_kl_bits:.4f} bits  val CE {r.val_ce_bits:.4f} bits  "
        f"{r.seconds:.1f}s{mark}",
        highlight=False,
    )
