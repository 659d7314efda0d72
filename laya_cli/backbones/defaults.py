"""Each kind of model's training defaults, beside the families that build it: the alignment term (``--align``,
``--align-target``, ``--align-loss``, the term's removal), ``--exit-aware`` and what a language model's head reads,
chosen from measurements, not by habit.

One table (``KIND_DEFAULTS``) serves both sides: ``training.defaults.resolved_alignment`` resolves a run's settings
from it, and the help texts of those options (``laya train --help``, docs/options.md) are written from it
(``default_text``), so what ``--help`` says a kind gets and what it trains with cannot disagree. A kind is a
built-in's name (``mlp``, ``vit_base``), a hub model's family (``hf``, ``timm``, ``torchvision``: ``kind_of``), or
``lm`` (``--task lm``: its kind is the task). A kind that is not listed trains without the term, as laya always
did, until a measurement says otherwise. The evidence for each entry is docs/results/network-alignment.md
(``python -m benchmarks.network_alignment``).

No torch: the settings read it for their help texts (``laya --help`` imports no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AlignDefault:
    align: float
    target: str
    losses: tuple[tuple[str, str], ...] = ()  # (pooling, --align-loss) where it is not rank
    exit_aware: float = 0.0  # --exit-aware W (training/exit_aware.py)
    # The network term's removal. "bypass": the term is this kind's only where its tapped blocks can be bypassed
    # (residual blocks that keep their input's shape: a ViT's); elsewhere (a ResNet's stages) it has none.
    removal: str = "auto"
    reads: str = "states"  # what a language model's head weighs of each layer (HeadSettings.reads; --task lm only)
    sharpness: float = 1.0  # --align-sharpness κ of the ranking loss (training/alignment.ranking_loss)

    def loss(self, pool: str | None) -> str:
        return dict(self.losses).get(pool or "", "rank")


@dataclass(frozen=True)
class KindDefault:
    """One kind of model's defaults: ``term`` for ``kind`` trained end to end or frozen, and who that is in words."""

    kind: str
    end_to_end: bool
    says: str  # the kind in --help's words ("the built-in mlp trained end to end")
    term: AlignDefault


OFF = AlignDefault(0.0, "head")

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
# - --align-sharpness (κ of the ranking loss) on that frozen ViT (3 seeds, docs/results/alpha-ceiling.md#training-α-
#   toward-its-ceiling): κ = 10 takes α's network faithfulness from 0.72 to 0.93 on every seed (AtP 0.97, the pooled
#   ceiling 0.96 on those heads) but test accuracy −0.7 pp on average (−2.25, −0.75, +1.00): past the 0.5 pp a
#   default may cost, so the kind keeps κ = 1 until more seeds (or a second model) say where its accuracy lies.
# The built-in CNN is not listed: removing any of its stages takes p_ŷ to about chance, so the effects tie and the
# term learns nothing.
FROZEN_VIT = AlignDefault(1.0, "network", removal="bypass")
KIND_DEFAULTS: tuple[KindDefault, ...] = (
    KindDefault("mlp", True, "the built-in mlp trained end to end", AlignDefault(0.3, "both", exit_aware=1.0)),
    KindDefault("hf", False, "a frozen Hugging Face transformer", AlignDefault(1.0, "network", (("mean", "both"),))),
    KindDefault("lm", False, "--task lm", AlignDefault(1.0, "network", exit_aware=1.0, reads="updates")),
    KindDefault("vit_base", False, "a frozen vit_base", FROZEN_VIT),
    KindDefault("timm", False, "a frozen timm model", FROZEN_VIT),
    KindDefault("torchvision", False, "a frozen torchvision model", FROZEN_VIT),
)
# (kind, trained end to end) -> the term
ALIGN_DEFAULTS: dict[tuple[str, bool], AlignDefault] = {(k.kind, k.end_to_end): k.term for k in KIND_DEFAULTS}
# What a term's removal asks of the model, in --help's words (said once after the kinds that share the term).
REMOVAL_SAYS = {"bypass": " whose tapped blocks can be bypassed (a ViT's, a CNN's residual blocks: --taps blocks)"}


def kind_of(backbone: str) -> str:
    """What a default is chosen for: a built-in by its name, a hub model by its family (``hf:NAME`` -> hf)."""
    prefix, sep, _ = backbone.partition(":")
    return prefix if sep else backbone


def term_for(backbone: str, end_to_end: bool) -> AlignDefault:
    """The term of ``backbone``'s kind trained end to end or frozen; OFF where the kind is not listed."""
    return ALIGN_DEFAULTS.get((kind_of(backbone), bool(end_to_end)), OFF)


def default_text(value_of: Callable[[AlignDefault], str | None], otherwise: str) -> str:
    """One setting's default per kind in words, from the table: ``V for KINDS; …; OTHERWISE elsewhere``.
    ``value_of``: what a kind's term sets it to, as said (None or ``otherwise``: the same as elsewhere)."""
    groups: dict[str, list[KindDefault]] = {}
    for entry in KIND_DEFAULTS:
        value = value_of(entry.term)
        if value is not None and value != otherwise:
            groups.setdefault(value, []).append(entry)
    said = [f"{value} for {_kinds(entries)}" for value, entries in groups.items()]
    return "; ".join([*said, f"{otherwise} elsewhere"])


def _kinds(entries: Sequence[KindDefault]) -> str:
    """The kinds of ``entries`` in words; kinds that share one term are said together, its removal's condition once."""
    terms: dict[AlignDefault, list[str]] = {}
    for entry in entries:
        terms.setdefault(entry.term, []).append(entry.says)
    return _listed([_listed(says, "or") + REMOVAL_SAYS.get(term.removal, "") for term, says in terms.items()])


def _listed(words: Sequence[str], last: str = "and") -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"
