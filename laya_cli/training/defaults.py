"""The alignment term a kind of model gets when the user names none: chosen from measurements, not by habit.

``--align`` and ``--align-target`` default to ``None`` ("the kind's"); ``resolved_alignment`` turns them into the λ
and the target this kind of model trains with, and the checkpoint records what it resolved to. Each kind's defaults
and their evidence are the table beside the backbone families (``backbones.defaults``), the one the options' help
texts are written from; a kind that is not listed trains without the term, as laya always did.
"""

from __future__ import annotations

from dataclasses import replace

from .. import backbones as bb
from ..backbones.defaults import OFF, AlignDefault, kind_of, term_for
from ..model.settings import HeadSettings
from ..runtime import distributed
from ..runtime.declare import evolve
from ..runtime.errors import LayaError
from .settings import NETWORK_TARGETS, TrainingSettings, TrainJobSettings


def kind_default(backbone: str, finetune: bool, head: str) -> AlignDefault:
    """The term a ``head`` on ``backbone`` (trained end to end or not) gets by default; OFF without α."""
    if head.lower() != "laya":
        return OFF
    return term_for(backbone, finetune)


def resolved_lm_head(head: HeadSettings) -> HeadSettings:
    """A language model's ``head`` with what it reads resolved: the kind's default where None, so the checkpoint
    records it and a bench compares a run's head with the one it asks for."""
    return head if head.reads is not None else replace(head, reads=kind_default("lm", False, "laya").reads)


def resolved_alignment(
    train: TrainingSettings, backbone: str, finetune: bool, head: str, pool: str | None = None
) -> TrainingSettings:
    """``train`` with ``align``, ``align_target``, ``align_sharpness`` and ``exit_aware`` resolved: the kind's default
    for what is None; a target given alone trains with λ = 1; a λ given alone ranks against the kind's target where it
    has one, else the head's. ``align_source`` says "default" where neither was given and the kind has a term (it may
    then be dropped with a note where it cannot run: ``job._network_alignment``). ``align_loss`` None is resolved once
    the backbone's ``pool`` is known (the job's; None: left for it), to the kind's loss for that pooling (rank without
    a term); ``align_sharpness`` None to the kind's κ where it trains with the kind's target, else 1."""
    kind = kind_default(backbone, finetune, head)
    align, target = train.align, train.align_target
    if align is None:
        align = kind.align if target is None else 1.0
    if target is None:
        target = kind.target if kind.align else "head"
    source = "default" if train.align is None and train.align_target is None and kind.align else train.align_source
    if not align:
        target = "head"  # no term: nothing to rank against
    if not align and train.align_loss not in (None, "rank"):
        raise LayaError(f"--align-loss {train.align_loss} says how --align fits α: this run has no alignment term "
                        "(--align 0, or the kind's default of none): add --align 1")  # fmt: skip
    if train.align_removal != "auto" and target not in NETWORK_TARGETS:
        raise LayaError("--align-removal says how --align-target network removes a block: add --align-target network")
    loss = train.align_loss
    if loss is None and (pool is not None or not align):
        loss = kind.loss(pool) if align and target == kind.target else "rank"
    if not align and train.align_sharpness not in (None, 1.0):
        raise LayaError(f"--align-sharpness {train.align_sharpness:g} says how --align ranks α: this run has no "
                        "alignment term (--align 0, or the kind's default of none): add --align 1")  # fmt: skip
    if loss == "distill" and train.align_sharpness not in (None, 1.0):
        raise LayaError(f"--align-sharpness {train.align_sharpness:g} scales the ranking loss: --align-loss distill "
                        "has none (use --align-loss rank or both)")  # fmt: skip
    sharpness = train.align_sharpness
    if sharpness is None:
        sharpness = kind.sharpness if align and target == kind.target else 1.0
    exit_aware = kind.exit_aware if train.exit_aware is None else train.exit_aware
    if train.exit_aware is None and kind_of(backbone) != "lm" and distributed.env_world_size() > 1:
        exit_aware = 0.0  # a classifier's --exit-aware runs in one process only: under torchrun its default is off
    removal = kind.removal if source == "default" and train.align_removal == "auto" else train.align_removal
    return replace(train, align=float(align), align_target=target, align_source=source, align_loss=loss,
                   align_sharpness=float(sharpness), align_removal=removal, exit_aware=float(exit_aware))  # fmt: skip


def without_bypass_default(train: TrainingSettings, backbone) -> TrainingSettings:
    """``train`` without the kind's default term where that term is for blocks that can be bypassed and ``backbone``'s
    cannot (a ResNet's stages change shape): the kind has no term there, as it had none before (nothing is noted);
    ``train`` as it is otherwise."""
    from .network_target import can_bypass

    if train.align_source != "default" or train.align_removal != "bypass" or can_bypass(backbone):
        return train
    return replace(train, align=0.0, align_target="head", align_loss="rank", align_sharpness=1.0, align_removal="auto")


def resolved_request(req: TrainJobSettings) -> TrainJobSettings:
    """A new ``req`` with its TrainingSettings resolved for the backbone it names (``req`` is left as it is): before
    its fingerprint is taken, so a resumed run or a reused ``laya bench`` run is one trained with the same term."""
    name = bb.backbone_name(req.backbone, req.arch)
    finetune = bb.is_builtin(name) if req.finetune is None else req.finetune
    return evolve(req, train=resolved_alignment(req.train, name, finetune, req.head))


# --finetune's backbone rate, relative to the head's --lr, for a backbone that starts from trained weights: the new
# head starts from nothing and needs --lr, weights already trained are disturbed by it (transformers fine-tune at
# 2e-5 to 5e-5, timm recipes use a lower rate for the body than for a new classifier). lr / 10 is 3e-5 at the default
# lr, inside transformers' range. A backbone from random initialisation learns at the head's rate, as before.
TRAINED_BACKBONE_LR_FACTOR = 0.1


def resolved_backbone_lr(train: TrainingSettings, finetune: bool, starts_trained: bool) -> TrainingSettings:
    """``train`` with ``backbone_lr`` and ``backbone_warmup`` resolved: fine-tuned from trained weights, --lr / 10 (or
    the rate given) warmed up over the first epoch; from random initialisation or weights laya cannot know (a module
    handed to the API), --lr (or the rate given, warmed up when below --lr); frozen, none (a rate given for a frozen
    backbone is refused: nothing would read it)."""
    if not finetune:
        if train.backbone_lr is not None:
            raise LayaError(
                "--backbone-lr is the learning rate of a backbone trained with --finetune; this one is frozen "
                "(add --finetune, or drop --backbone-lr)"
            )
        return replace(train, backbone_warmup=False)
    factor = TRAINED_BACKBONE_LR_FACTOR if starts_trained else 1.0
    rate = train.lr * factor if train.backbone_lr is None else train.backbone_lr
    warmup = starts_trained or rate < train.lr  # a rate of its own, given below the head's: warmed up too
    return replace(train, backbone_lr=float(rate), backbone_warmup=bool(warmup))
