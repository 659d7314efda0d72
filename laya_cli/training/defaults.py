"""The alignment term a kind of model gets when the user names none: chosen from measurements, not by habit.

``--align`` and ``--align-target`` default to ``None`` ("the kind's"); ``resolved_alignment`` turns them into the λ
and the target this kind of model trains with, and the checkpoint records what it resolved to. The evidence for
each entry is docs/results/network-alignment.md (``python -m benchmarks.network_alignment``); a kind that is not
listed trains without the term, as laya always did, until a measurement says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import backbones as bb
from ..model.settings import HeadConfig
from ..runtime import distributed
from ..runtime.errors import LayaError
from .settings import NETWORK_TARGETS, TrainConfig, TrainRequest


@dataclass(frozen=True)
class AlignDefault:
    align: float
    target: str
    losses: tuple[tuple[str, str], ...] = ()  # (pooling, --align-loss) where it is not rank
    exit_aware: float = 0.0  # --exit-aware W (training/exit_aware.py)
    # The network term's removal. "bypass": the term is this kind's only where its tapped blocks can be bypassed
    # (residual blocks that keep their input's shape: a ViT's); elsewhere (a ResNet's stages) it has none.
    removal: str = "auto"
    reads: str = "states"  # what a language model's head weighs of each layer (HeadConfig.reads; --task lm only)

    def loss(self, pool: str | None) -> str:
        return dict(self.losses).get(pool or "", "rank")


OFF = AlignDefault(0.0, "head")

# (kind of backbone, trained end to end) -> the term; the kind is the built-in's name, or a hub model's family.
# - The built-in MLP end to end (make demo): α ranked against the network-scope effects and the head's own, λ 0.3
#   (both): over 10 digits seeds network faithfulness −0.29 → 0.56 (Grad×Act 0.24, AtP 0.40), 1.9 effective layers
#   instead of a collapse onto one, and no regression: accuracy −0.5 pp, head faithfulness 0.90 → 0.87, head
#   Deletion@1 / oracle 0.99 → 0.96 (intervals overlap); the network target alone reaches 0.96 at network scope but
#   drops head Deletion@1 / oracle to 0.79 (Fashion-MNIST: no regression either way).
# - A frozen Hugging Face transformer (pretrained MiniLM and SmolLM2-135M): without the term α collapses onto one
#   layer and its network faithfulness is about 0; with it α is about as faithful as AtP. With mean pooling the
#   ranking loss alone costs accuracy (−1.6 pp on MiniLM) and ranking + distillation does not (−0.15 pp); with
#   one token pooled (cls, a decoder's last) distillation costs accuracy (−2.5 pp) and ranking alone gains it.
# - A causal language model (--task lm, per token): without the term α sits on the last layer (0.99) and its
#   network faithfulness is about 0 (−0.10 over 5 seeds of the WordNet GPT-2); ranked against the bypass effects it
#   is 0.65, above AtP (0.24; α − AtP +0.41 [0.35, 0.48]) for +0.9 % of the head's cross-entropy, and with
#   --exit-aware (the LM default, its exit_aware below) the α-guided exit saves 62 % of layers within 1 % of the
#   model's cross-entropy (confidence exit 2.5 %); at batch 128 (3 seeds, 11 steps) 0.52 vs plain −0.08, exit
#   21 % but head-scope faithfulness 0.47 → 0.02 (the known price). Reading the blocks' updates (reads="updates",
#   since 2026-12-06; 3 seeds of the GPT-2 at batch 16) buys that price back: head CE 8.442 → 8.431 bits, head-scope
#   faithfulness 0.00 → 0.25, α-exit 73 % → 83 %, network faithfulness 0.65 → 0.68; on SmolLM2-135M (30 layers) α
#   over states stays one-hot even with the term (network faithfulness −0.03) and over updates spreads (0.36; AtP
#   0.52). docs/lm.md.
# - --exit-aware 1 for the built-in MLP end to end: over 5 digits seeds the head truncated after block 1 goes from
#   0.73 to 0.96 accuracy and laya depth's confidence exit saves 78 % of the FLOPs within 1 pp instead of 35 % (paired
#   +42 pp [36, 49]), head-scope faithfulness 0.91 → 0.99, network-scope unchanged (0.56), accuracy −0.45 pp
#   [−1.4, +0.5]; Fashion-MNIST (3 seeds): no regression (docs/depth.md, exit-aware training).
# - A frozen timm or torchvision model whose blocks can be bypassed (a ViT; vit_base): a timm ViT-tiny trained here on
#   Fashion-MNIST, then frozen (3 seeds; no pretrained ViT can be downloaded here): α's network faithfulness −0.31 →
#   0.75 (Grad×Act 0.37, AtP 0.86), accuracy −0.3 pp (intervals overlap), 1.8 → 4.1 effective layers; `both` keeps
#   more of the head's account but only 0.46 at network scope. As for the frozen hf transformers, the price is the
#   head-scope account (faithfulness 0.61 → 0.21). Where the blocks change shape (a ResNet's stages) no term: the
#   built-in CNN's stage effects tie.
# - A frozen timm or torchvision CNN is tapped at its residual blocks since 2026-12-06 (--taps blocks: they can be
#   bypassed), so FROZEN_VIT's term reaches it; --taps stages keeps the stage ends and no term. On the pretrained
#   EfficientNet-Lite0 (5 hard Fashion-MNIST classes, 1 seed each; docs/results/cnn-depth.md) the block taps alone
#   take AtP's network faithfulness from 0.15 (stages) to 0.76 and accuracy 0.773 → 0.793; α's, plain, is 0.10.
#   What the term does there was not measured over seeds in time (see the results page): the default is the ViT's
#   evidence carried over to blocks that are bypassed the same way, not a CNN measurement.
# The built-in CNN is not listed: removing any of its stages takes p_ŷ to about chance, so the effects tie and the
# term learns nothing.
FROZEN_VIT = AlignDefault(1.0, "network", removal="bypass")
ALIGN_DEFAULTS: dict[tuple[str, bool], AlignDefault] = {
    ("mlp", True): AlignDefault(0.3, "both", exit_aware=1.0),
    ("hf", False): AlignDefault(1.0, "network", (("mean", "both"),)),
    ("lm", False): AlignDefault(1.0, "network", exit_aware=1.0, reads="updates"),  # --task lm: its kind is the task
    ("vit_base", False): FROZEN_VIT,
    ("timm", False): FROZEN_VIT,
    ("torchvision", False): FROZEN_VIT,
}


def kind_of(backbone: str) -> str:
    """What a default is chosen for: a built-in by its name, a hub model by its family (``hf:NAME`` -> hf)."""
    prefix, sep, _ = backbone.partition(":")
    return prefix if sep else backbone


def kind_default(backbone: str, finetune: bool, head: str) -> AlignDefault:
    """The term a ``head`` on ``backbone`` (trained end to end or not) gets by default; OFF without α."""
    if head.lower() != "laya":
        return OFF
    return ALIGN_DEFAULTS.get((kind_of(backbone), bool(finetune)), OFF)


def resolved_lm_head(head: HeadConfig) -> HeadConfig:
    """A language model's ``head`` with what it reads resolved: the kind's default where None, so the checkpoint
    records it and a bench compares a run's head with the one it asks for."""
    return head if head.reads is not None else replace(head, reads=kind_default("lm", False, "laya").reads)


def resolved_alignment(
    train: TrainConfig, backbone: str, finetune: bool, head: str, pool: str | None = None
) -> TrainConfig:
    """``train`` with ``align``, ``align_target`` and ``exit_aware`` resolved: the kind's default for what is None; a
    target given alone trains with λ = 1; a λ given alone ranks against the kind's target where it has one, else the
    head's. ``align_source`` says "default" where neither was given and the kind has a term (it may then be dropped with
    a note where it cannot run: ``job._network_alignment``). ``align_loss`` None is resolved once the backbone's
    ``pool`` is known (the job's; None: left for it), to the kind's loss for that pooling (rank without a term)."""
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
    exit_aware = kind.exit_aware if train.exit_aware is None else train.exit_aware
    if train.exit_aware is None and kind_of(backbone) != "lm" and distributed.env_world_size() > 1:
        exit_aware = 0.0  # a classifier's --exit-aware runs in one process only: under torchrun its default is off
    removal = kind.removal if source == "default" and train.align_removal == "auto" else train.align_removal
    return replace(train, align=float(align), align_target=target, align_source=source, align_loss=loss,
                   align_removal=removal, exit_aware=float(exit_aware))  # fmt: skip


def without_bypass_default(train: TrainConfig, backbone) -> TrainConfig:
    """``train`` without the kind's default term where that term is for blocks that can be bypassed and ``backbone``'s
    cannot (a ResNet's stages change shape): the kind has no term there, as it had none before (nothing is noted);
    ``train`` as it is otherwise."""
    from .network_target import can_bypass

    if train.align_source != "default" or train.align_removal != "bypass" or can_bypass(backbone):
        return train
    return replace(train, align=0.0, align_target="head", align_loss="rank", align_removal="auto")


def resolved_request(req: TrainRequest) -> TrainRequest:
    """``req`` with its TrainConfig resolved (in place) for the backbone it names: before its fingerprint is taken,
    so a resumed run or a reused ``laya bench`` run is one trained with the same term."""
    name = bb.backbone_name(req.backbone, req.arch)
    finetune = bb.is_builtin(name) if req.finetune is None else req.finetune
    req.train = resolved_alignment(req.train, name, finetune, req.head)
    return req


# --finetune's backbone rate, relative to the head's --lr, for a backbone that starts from trained weights: the new
# head starts from nothing and needs --lr, weights already trained are disturbed by it (transformers fine-tune at
# 2e-5 to 5e-5, timm recipes use a lower rate for the body than for a new classifier). lr / 10 is 3e-5 at the default
# lr, inside transformers' range. A backbone from random initialisation learns at the head's rate, as before.
TRAINED_BACKBONE_LR_FACTOR = 0.1


def resolved_backbone_lr(train: TrainConfig, finetune: bool, starts_trained: bool) -> TrainConfig:
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
