"""Heads for language models: at every position t, the layers' hidden states h_1(t)..h_L(t) give next-token logits
through the model's own readout (final norm, then unembedding; frozen, ``backbones.lm.Readout``).

    laya    z_i = T_i h_i,  α = softmax(MLP([P z_1 ‖ … ‖ P z_L]) / τ),  logits = readout(Σ_i α_i z_i)
    tuned   layer i alone: readout(T_i h_i)            the tuned lens (Belrose et al., 2023)
    logit   layer i alone: readout(h_i)                the logit lens (nostalgebraist, 2020)
    last    readout(h_L)                               the model itself

T_i is a translator per layer, an affine map initialised to the identity (so an untrained LAYA head is a mixture
of logit lenses and an untrained tuned lens is the logit lens); P projects each z_i to d* for the scorer, as
LAYA's adapters do for classifiers. Inputs are (N, L, d): N token positions, the positions of a batch flattened.

Vocabularies are large: nothing here materialises more than ``rows_per_chunk`` × V logits at once; the losses are
sums over chunks (``chunked``), and training calls backward per chunk.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .heads import Head, HeadOutput
from .settings import HeadSettings

if TYPE_CHECKING:
    from ..backbones.lm import LanguageModel

LOGITS_PER_CHUNK = 1 << 22  # ≈ 16 MiB of float32 logits per chunk of positions
BITS = 1 / math.log(2)


def translators(n_layers: int, width: int) -> nn.ModuleList:
    """One affine map per layer, initialised to the identity."""
    maps = nn.ModuleList(nn.Linear(width, width) for _ in range(n_layers))
    with torch.no_grad():
        for m in maps:
            m.weight.copy_(torch.eye(width))
            m.bias.zero_()
    return maps


class LayaLMHead(Head):
    """The LAYA head once per position, predicting the next token through the model's readout. A ``Head``: the
    per-token audit hands it the layers' states at N positions as a classifier head's r_1..r_L (N, d) and its
    "classes" are the vocabulary; no additive per-layer logits (the final norm sits between α and the logits)."""

    kind, has_alpha, maskable = "laya", True, True
    cascade = ("scorer", "project", "translators")

    def __init__(self, n_layers: int, width: int, readout: nn.Module, cfg: HeadSettings):
        super().__init__()
        self.tau, self.reads = cfg.tau, cfg.reads or "states"  # None: a checkpoint from before the setting
        self.translators = translators(n_layers, width)
        self.project = nn.Linear(width, cfg.d_star)
        self.scorer = nn.Sequential(
            nn.Linear(n_layers * cfg.d_star, cfg.score_hidden), nn.GELU(), nn.Linear(cfg.score_hidden, n_layers)
        )
        if self.reads == "updates":  # α starts uniform, so the untrained head is the model itself (Σ_i u_i = h_L)
            nn.init.zeros_(self.scorer[-1].weight), nn.init.zeros_(self.scorer[-1].bias)
        self.readout = readout

    def embed(self, hs: Tensor | Sequence[Tensor]) -> Tensor:
        """z: (N, L, d), each layer's state (or update: ``reads``) translated; ``hs`` (N, L, d) or its L slices (N, d),
        as a classifier head's r_1..r_L (``training.alignment.alignment_loss`` hands it those)."""
        hs = hs if isinstance(hs, Tensor) else torch.stack(list(hs), dim=1)
        if self.reads == "updates":  # u_1 = h_1, u_i = h_i − h_{i−1}: Σ_i u_i = h_L, the model's own last state
            hs = torch.cat([hs[:, :1], hs.diff(dim=1)], dim=1)
        return torch.stack([t(hs[:, i]) for i, t in enumerate(self.translators)], dim=1)

    def attention(self, z: Tensor, feats: Sequence[Tensor] | None = None) -> Tensor:
        """α from z; ``feats`` (what a classifier head's positions reader reads) is unused: this head reads states."""
        return torch.softmax(self.scorer(self.project(z).flatten(1)) / self.tau, dim=-1)

    def forward(self, hs: Tensor | Sequence[Tensor], alpha_mask: Tensor | None = None) -> HeadOutput:
        """(logits (N, V), α (N, L)) from hs (N, L, d) or its L slices (N, d); ``alpha_mask`` (N, L) or (L,): α of
        the masked layers set to 0, the rest renormalised (layer dropout, the "mask" removal)."""
        hs = hs if isinstance(hs, Tensor) else torch.stack(list(hs), dim=1)
        z = self.embed(hs)
        alpha = self.attention(z)
        if alpha_mask is not None:
            alpha = alpha * alpha_mask
            alpha = alpha / alpha.sum(-1, keepdim=True).clamp_min(1e-12)
        return HeadOutput(self.readout((alpha.unsqueeze(-1) * z).sum(1)), alpha)

    def removed_logits(
        self, hs: Tensor | Sequence[Tensor], fills: Sequence[Tensor], stack: bool = False
    ) -> Iterator[Tensor]:
        """The logits of the whole input, then with each layer i's state replaced by ``fills[i]`` (d,) in turn (the
        leave-one-layer-out passes, ``metrics.lolo_effects``): the other layers' translations computed once, each
        pass translating only the replaced layer — L+1 readouts, not (L+1)·L translations. Yields the passes in
        order, (N, V) logits each; with ``stack``, as many consecutive passes at a time as fit ``LOGITS_PER_CHUNK``
        logits (at least one), their rows stacked ((k·N, V): one attention and one readout for k passes). A row's
        logits are the same whichever rows share its pass where a pass has ``metrics.STACK_MIN_ROWS`` rows (the
        caller's guard: a CPU's matrix kernels round fewer rows differently)."""
        hs = hs if isinstance(hs, Tensor) else torch.stack(list(hs), dim=1)
        z = self.embed(hs)
        passes = len(fills) + 1
        per_group = max(1, LOGITS_PER_CHUNK // max(len(z) * self.readout.vocabulary, 1)) if stack else 1
        for first in range(0, passes, per_group):
            count = min(per_group, passes - first)
            group = z.unsqueeze(0).repeat(count, 1, 1, 1) if count > 1 or first else z.unsqueeze(0)  # (k, N, L, d)
            for k in range(count):
                if first + k:  # pass j > 0 replaces layer j − 1
                    self._replace(group[k], hs, fills[first + k - 1], first + k - 1)
            mixed = group.flatten(0, 1)
            yield self.readout((self.attention(mixed).unsqueeze(-1) * mixed).sum(1))

    def _replace(self, z: Tensor, hs: Tensor, fill: Tensor, i: int) -> None:
        """z (N, L, d) in place: the translations that layer i's state replaced by ``fill`` changes."""
        fill = fill.to(z).expand(len(z), -1)
        if self.reads == "states":
            z[:, i] = self.translators[i](fill)
        else:  # the state enters two updates: its own and the next layer's
            z[:, i] = self.translators[i](fill - hs[:, i - 1] if i else fill)
            if i + 1 < hs.shape[1]:
                z[:, i + 1] = self.translators[i + 1](hs[:, i + 1] - fill)


class TunedLens(nn.Module):
    """A translator per layer, each layer read alone: ``layer_logits(hs, i)``."""

    kind = "tuned"

    def __init__(self, n_layers: int, width: int, readout: nn.Module):
        super().__init__()
        self.translators = translators(n_layers, width)
        self.readout = readout

    def layer_logits(self, hs: Tensor, i: int) -> Tensor:
        return self.readout(self.translators[i](hs[:, i]))

    def embed(self, hs: Tensor) -> Tensor:
        """(N, L, d): every layer's state translated (``readout`` of it: each layer's tuned-lens logits)."""
        return torch.stack([t(hs[:, i]) for i, t in enumerate(self.translators)], dim=1)


def stored_weights(module: nn.Module) -> dict[str, Tensor]:
    """A head's weights as a checkpoint stores them: without the readout (the model's own, rebuilt from it)."""
    return {k: v.detach().cpu() for k, v in module.state_dict().items() if not k.startswith("readout.")}


def load_weights(module: nn.Module, weights: dict[str, Tensor]) -> None:
    missing, unexpected = module.load_state_dict(weights, strict=False)
    stray = [k for k in missing if not k.startswith("readout.")] + list(unexpected)
    if stray:
        from ..runtime.errors import LayaError

        raise LayaError(
            f"the checkpoint's {getattr(module, 'kind', 'head')} weights do not fit: {', '.join(stray[:3])}"
        )


# --------------------------------------------------------------------------- losses, chunk by chunk


def chunks(n_rows: int, vocabulary: int) -> Iterator[slice]:
    step = max(1, LOGITS_PER_CHUNK // max(vocabulary, 1))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def kl_to(reference_log_probs: Tensor, logits: Tensor) -> Tensor:
    """(N,) KL(p_ref ‖ p) in nats: how far a prediction is from the reference distribution (the model's own)."""
    return F.kl_div(F.log_softmax(logits.float(), -1), reference_log_probs, log_target=True, reduction="none").sum(-1)


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """(N,) −log p(next token) in nats."""
    return F.cross_entropy(logits.float(), targets, reduction="none")


@dataclass
class Reference:
    """What the losses need of the model's own next-token distribution at c positions, computed once per position
    and shared by every row read there (the LAYA head's, each layer's lens): p (c, V), Σ_v p log p (c,) and Σ_v p
    (c,: 1 up to float32's rounding of V terms, kept so a reading equal to the model's own has KL 0, not ~1e-3)."""

    p: Tensor
    neg_entropy: Tensor
    mass: Tensor

    @classmethod
    @torch.no_grad()
    def of(cls, final_logits: Tensor) -> Reference:
        log_p = F.log_softmax(final_logits.float(), -1)
        p = log_p.exp()
        return cls(p, (p * log_p).sum(-1), p.sum(-1))


def _kl_rows(logits: Tensor, lse: Tensor, ref: Reference) -> Tensor:
    """(c, R) Σ p log p − Σ_v p_v l_v + Σp · lse(l): KL(p ‖ softmax(l)) for logits (c, R, V)."""
    # Σ_v p_v l_v elementwise: a float32 bmm over 49k terms is off by ~5e-3 nats on SmolLM2 (measured), this by 1e-5
    cross = (logits * ref.p.unsqueeze(1)).sum(-1)
    return ref.neg_entropy.unsqueeze(-1) - cross + ref.mass.unsqueeze(-1) * lse


def _ce_rows(logits: Tensor, lse: Tensor, y: Tensor) -> Tensor:
    """(c, R) −log softmax(l)[y] = lse(l) − l_y for logits (c, R, V), each position's R readings of its next token."""
    return lse - logits.gather(-1, y.view(-1, 1, 1).expand(-1, logits.shape[1], 1)).squeeze(-1)


class _FusedLoss(torch.autograd.Function):
    """Per row of logits (c, R, V) — R readings of each of c positions — KL(p ‖ softmax(logits)) when a
    ``Reference`` is given, else −log softmax(logits)[y]: from one log-sum-exp, in as few passes over the vocabulary
    as it takes (``_kl_rows``; CE = lse(l) − l_y), and the gradient
    softmax(l)·Σp − p (or − one-hot y) written in place, instead of log-softmax, the KL's terms and their backward
    each materialising a (c, R, V) tensor."""

    @staticmethod
    def forward(ctx, logits, ref, y):
        logits = logits.float()
        lse = torch.logsumexp(logits, -1)  # (c, R)
        if ref is not None:
            loss = _kl_rows(logits, lse, ref)
            ctx.save_for_backward(logits, lse, ref.p, ref.mass)
        else:
            loss = _ce_rows(logits, lse, y)
            ctx.save_for_backward(logits, lse, y)
        ctx.kl = ref is not None
        return loss

    @staticmethod
    def backward(ctx, grad):
        logits, lse, *ref = ctx.saved_tensors
        g = (logits - lse.unsqueeze(-1)).exp_()  # softmax(l)
        if ctx.kl:
            p, mass = ref
            g.mul_(mass.view(-1, 1, 1)).sub_(p.unsqueeze(1))
        else:
            (y,) = ref
            g.scatter_add_(-1, y.view(-1, 1, 1).expand(-1, g.shape[1], 1), g.new_full((*g.shape[:2], 1), -1.0))
        return g.mul_(grad.unsqueeze(-1)), None, None


def truncated_states(hs: Tensor, reference: Tensor, depths: Tensor) -> tuple[Tensor, Tensor]:
    """(states, keep): each position's layers above its depth (``depths`` (n,)) replaced by r̄ (L, d), and the (n, L)
    mask of the layers it keeps — the input and the α mask of the head truncated there (``laya depth``'s exit reads it,
    ``training.exit_aware`` trains it)."""
    keep = torch.arange(hs.shape[1], device=hs.device) < depths.unsqueeze(1)
    return torch.where(keep.unsqueeze(-1), hs, reference.to(hs.dtype)), keep.to(hs.dtype)


def fused_loss(name: str, logits: Tensor, ref: Reference | None, y: Tensor) -> Tensor:
    """(c, R) the training objective of R readings per position (logits (c, R, V)): ``kl`` to the model's
    distribution (``ref``), ``ce`` to the next token ``y`` (c,); exact (``kl_to`` and ``cross_entropy`` in fewer
    passes), differentiable in the logits."""
    return _FusedLoss.apply(logits, ref if name == "kl" else None, y)


@torch.no_grad()
def kl_and_ce(logits: Tensor, ref: Reference, y: Tensor) -> tuple[Tensor, Tensor]:
    """(c, R) KL(p_model ‖ p) and −log p(y) of R readings per position (logits (c, R, V)), from one log-sum-exp."""
    logits = logits.float()
    lse = torch.logsumexp(logits, -1)
    return _kl_rows(logits, lse, ref), _ce_rows(logits, lse, y)


# --------------------------------------------------------------------------- a trained checkpoint, rebuilt


@dataclass
class LayaLM:
    """A ``--task lm`` checkpoint rebuilt: the tapped model and its readout, the two trained heads, r̄ per layer. As
    ``LayaModel``: ``task`` (``"lm"``), ``checkpoint``, ``to_checkpoint()``, ``save``, ``to``, ``layer_names``."""

    task: ClassVar[str] = "lm"
    lm: LanguageModel
    laya: LayaLMHead
    tuned: TunedLens  # a checkpoint trained with --lens logit|none has none: identity translators, the logit lens
    reference: list[Tensor]
    ckpt: dict

    @property
    def lens(self) -> str:
        """The lens the checkpoint was trained with (``--lens``; older checkpoints: tuned)."""
        return (self.ckpt.get("lens") or {}).get("kind", "tuned")

    @property
    def has_tuned_lens(self) -> bool:
        return bool(self.ckpt.get("tuned_lens"))

    @property
    def layer_names(self) -> list[str]:
        return list(self.ckpt["layers"])

    @property
    def checkpoint(self) -> dict:
        """The checkpoint it was rebuilt from (as ``LayaModel.checkpoint``): its metrics, history, options."""
        return self.ckpt

    def to_checkpoint(self) -> dict:
        """The checkpoint dict (as ``LayaModel.to_checkpoint``): the heads are not trained further after it was
        written, so it is the one it was rebuilt from."""
        return self.ckpt

    def save(self, path) -> Path:
        """Write the checkpoint ``laya train --task lm`` writes (atomically); ``laya audit``, ``depth``, ``export``
        and ``diff`` read it."""
        from .checkpoint import save_checkpoint

        save_checkpoint(self.ckpt, path)
        return Path(path)

    def to(self, device) -> LayaLM:
        self.lm.to(device)
        device = self.lm.head_device  # ``device``, or the readout's where --device-map placed the model
        self.laya.to(device)
        self.tuned.to(device)
        self.reference = [r.to(device) for r in self.reference]
        return self


def lm_from_checkpoint(ckpt: dict, device_map: str | None = None, lm: LanguageModel | None = None) -> LayaLM:
    """The model by name (its SHA-256 checked), the stored tokenizer, the heads' stored weights; ``device_map``:
    transformers' placement of the model (``--device-map``); ``lm``: that model already loaded for a checkpoint
    whose ``backbone`` record is this one's (``same_frozen_model``), shared rather than loaded again."""
    from ..backbones.lm import build_language_model
    from ..backbones.spec import BackboneSpec
    from ..backbones.tokenizers import set_tokenizer

    section = ckpt["backbone"]
    if lm is None:
        spec = BackboneSpec.from_dict(section["spec"])
        lm = build_language_model(spec, expect_sha256=section.get("sha256"), device_map=device_map)
        recorded = section.get("input") or {}
        if recorded.get("tokenizer"):  # the tokenizer it was trained with (learnt on its text, where it had none)
            text = lm.backbone.adapter.text
            set_tokenizer(text, recorded["tokenizer"], recorded["pad_id"], recorded.get("source", ""))
    width = int(lm.readout.unembedding.weight.shape[1])
    laya = LayaLMHead(lm.num_layers, width, lm.readout, HeadSettings(**ckpt["head"]["config"]))
    tuned = TunedLens(lm.num_layers, width, lm.readout)
    load_weights(laya, ckpt["head"]["weights"])
    if ckpt.get("tuned_lens"):  # else (--lens logit|none) the untrained tuned lens: the logit lens
        load_weights(tuned, ckpt["tuned_lens"]["weights"])
    return LayaLM(lm, laya.eval(), tuned.eval(), [r.float() for r in ckpt["reference"]], ckpt)


def same_frozen_model(a: dict, b: dict) -> bool:
    """Two ``--task lm`` checkpoints of one frozen model: the same name, layers, SHA-256 and tokenizer (their
    ``backbone`` records equal), so one loaded copy serves both (``laya diff``: a model placed over every device
    by ``--device-map`` is not loaded twice)."""
    return a["backbone"] == b["backbone"]
