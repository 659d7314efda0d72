"""``laya train --task lm``: a LAYA head at every position of a causal language model, and its baselines.

One pass of the frozen model per batch of packed text blocks feeds two heads at once: the LAYA head and the tuned
lens (a translator per layer), trained on the same positions with the same objective (``--objective kl``: the
model's own next-token distribution, as the tuned lens trains; ``ce``: the next token). The logit lens and the
model itself need no training. Held-out figures per token, in bits: each layer's KL to the model's final
distribution and cross-entropy, for the logit and the tuned lens; the LAYA head's and the model's (docs/lm.md).
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from ..auditing.collapse import collapse_summary, trained_against
from ..auditing.question import question_of_training
from ..backbones.lm import LanguageModel, build_language_model
from ..backbones.spec import BackboneSpec
from ..backbones.tokenizers import set_tokenizer, train_tokenizer
from ..data.corpus import Corpus, token_blocks
from ..data.datasets import corpus_path, open_named_corpus
from ..features.lm_positions import batches, token_states
from ..model.checkpoint import save_checkpoint
from ..model.lm_heads import (
    BITS,
    LayaLMHead,
    Reference,
    TunedLens,
    chunks,
    cross_entropy,
    fused_loss,
    kl_and_ce,
    stored_weights,
    truncated_states,
)
from ..runtime import progress
from ..runtime.declare import evolve
from ..runtime.distributed import (
    all_sum,
    all_sum_,
    barrier,
    cat_rows,
    gather_rows,
    is_main,
    my_rows,
    shard_bounds,
    sum_gradients,
)
from ..runtime.errors import LayaError
from ..runtime.fileio import check_writable
from .defaults import resolved_alignment, resolved_lm_head
from .exit_aware import ExitAware
from .lm_alignment import TokenAlignment
from .loop import EarlyStopping, check_finite_weights, epochs, non_finite_loss
from .settings import TrainJobSettings
from .shaping import layer_dropout_mask


@dataclass
class LMEpoch:
    epoch: int
    loss: float  # the training objective per token (nats), LAYA and tuned lens summed (and the --align and
    # --exit-aware terms)
    val_kl_bits: float
    val_ce_bits: float
    seconds: float
    best: bool


CORPUS_READER = "--task lm reads a text corpus"  # who reads the corpus, in the error of any other --dataset


def _corpus(req: TrainJobSettings) -> Corpus:
    """The corpus, its first documents read: empty, blank or undecodable text is one line before any model loads."""
    corpus = open_named_corpus(req.data.name, CORPUS_READER, req.data.text_column, req.data.encoding)
    if next(corpus.documents("train"), None) is None:
        raise LayaError(f"{req.data.name}: the training text is shorter than one block: it is empty (no line holds any "
                        "text)")  # fmt: skip
    if next(corpus.documents("test"), None) is None:
        raise LayaError(
            f"{req.data.name}: the held-out text is shorter than one block: it is empty"
            + (" (without a test file every tenth line is held out: it needs 10 lines)" if corpus.test is None else "")
        )
    return corpus


def check_blocks(req: TrainJobSettings, lm: LanguageModel, corpus: Corpus, block: int) -> None:
    """The training and the held-out text each hold one block of ``block`` tokens at least (read until the first
    one is packed): checked before the run is announced, not after its first epoch."""
    tokenizer = lm.backbone.adapter.text.tokenizer
    for split, what in (("train", "training"), ("test", "held-out")):
        if next(token_blocks(corpus.documents(split), tokenizer, block, lm.eos_id), None) is None:
            raise LayaError(
                f"{req.data.name}: the {what} text is shorter than one block of {block} tokens (--block-size)"
            )


def _with_tokenizer(lm: LanguageModel, corpus: Corpus) -> None:
    """A model saved without a tokenizer gets a word-level one learnt on (the first 50,000 of) its training text."""
    text = lm.backbone.adapter.text
    if text.tokenizer:
        return
    docs = list(itertools.islice(corpus.documents("train"), 50_000))
    trained = train_tokenizer(text, docs, "the training text")
    set_tokenizer(text, trained.tokenizer, trained.pad_id, trained.source)


def _block_size(req: TrainJobSettings, lm: LanguageModel) -> int:
    positions = lm.backbone.adapter.text.max_length
    block = req.lm.block_size or min(128, positions)
    if not 2 <= block <= positions:
        raise LayaError(f"--block-size {block}: the model reads 2 to {positions} positions")
    return block


def lens_rows(n_blocks: int, per_block: int, k: int, generator: torch.Generator | None) -> Tensor | None:
    """The positions of one batch the lens reads (``--lens-sample K``): K of its n_blocks × per_block positions,
    drawn without replacement (the same on every rank: the generator advances alike), as this rank's row indices
    (under torchrun each rank holds a contiguous share of the blocks); None: every position (K 0 or ≥ the batch)."""
    total = n_blocks * per_block
    if k <= 0 or k >= total:
        return None
    picked = torch.randperm(total, generator=generator)[:k].sort().values
    lo, hi = shard_bounds(n_blocks)
    mine = picked[(picked >= lo * per_block) & (picked < hi * per_block)]
    return mine - lo * per_block


def reference_of(readout, h_last: Tensor) -> Reference:
    """The model's own next-token distribution at each position: its readout of its last layer (no grad)."""
    with torch.no_grad():
        return Reference.of(readout(h_last))


def lens_logits(readout, states: Tensor) -> Tensor:
    """(c·L, V): every layer's reading of c positions in one readout call (states (c, L, d) flattened); the rows of
    one position are adjacent (position-major)."""
    return readout(states.flatten(0, 1))


def train_step(
    laya: LayaLMHead,
    tuned: TunedLens | None,
    hs: Tensor,
    targets: Tensor,
    name: str,
    opt,
    dropout: float,
    sample: Tensor | None = None,
    align: Callable[[], Tensor | None] | None = None,
    exit_aware: tuple[float, Tensor, Tensor] | None = None,
) -> float:
    """One optimiser step on a batch of positions; backward chunk by chunk (never N × V logits at once). The LAYA
    head reads every position through one readout each; the tuned lens (None: not trained, ``--lens logit|none``)
    reads the positions of ``sample`` (this rank's rows of ``lens_rows``; None: all), every layer of each in one
    readout call. Its loss is the mean over those positions, so a sample estimates the full batch's without bias.
    ``name``: the objective (``--objective``: kl to the model's distribution, or ce to the next token).
    ``dropout``: each position's α over a random subset of the layers (``--layer-dropout``), as for classifiers.
    ``align``: the alignment term of this batch (``lm_align.TokenAlignment``), added to the loss; None: none.
    ``exit_aware``: (W, r̄, depths): W · the objective of the head truncated at each position's depth, added
    (``exit_aware``; ``--exit-aware``); None: none."""
    opt.zero_grad(set_to_none=True)
    n = all_sum([len(targets)])[0]  # under torchrun: this rank's positions of one global batch
    head_losses, lens_losses = [], []  # each chunk's summed loss, read on the host once per step (``summed``)
    for rows in chunks(len(targets), laya.readout.vocabulary):
        h, y = hs[rows], targets[rows]
        ref = reference_of(laya.readout, h[:, -1]) if name == "kl" else None
        mask = layer_dropout_mask(len(y), h.shape[1], dropout, device=h.device) if dropout else None
        loss = fused_loss(name, laya(h, mask)[0].unsqueeze(1), ref, y).sum()
        if exit_aware is not None:
            weight, r_bar, depths = exit_aware
            seen, keep = truncated_states(h, r_bar, depths[rows].to(h.device))
            loss = loss + weight * fused_loss(name, laya(seen, keep)[0].unsqueeze(1), ref, y).sum()
        (loss / n).backward()
        head_losses.append(loss.detach())
    k = 0
    if tuned is not None:
        h_lens = hs if sample is None else hs[sample.to(hs.device)]
        y_lens = targets if sample is None else targets[sample.to(targets.device)]
        k, L = all_sum([len(y_lens)])[0], hs.shape[1]
        for rows in chunks(len(y_lens), laya.readout.vocabulary * L):
            h, y = h_lens[rows], y_lens[rows]
            ref = reference_of(laya.readout, h[:, -1]) if name == "kl" else None
            logits = lens_logits(tuned.readout, tuned.embed(h)).reshape(len(y), L, -1)
            loss = fused_loss(name, logits, ref, y).sum()
            (loss / k).backward()
            lens_losses.append(loss.detach())
    term = align() if align is not None else None
    if term is not None:
        term.backward()
    sum_gradients([p for m in (laya, tuned) if m is not None for p in m.parameters() if p.requires_grad])
    opt.step()
    total, local, align_loss = summed(head_losses, lens_losses, term.detach() if term is not None else None)
    lens_loss = all_sum([local])[0] / max(k, 1) if tuned is not None else 0.0
    align_loss = all_sum([align_loss])[0] if align is not None else 0.0
    return all_sum([total])[0] / n + lens_loss + align_loss


def summed(head_losses: list[Tensor], lens_losses: list[Tensor], term: Tensor | None) -> tuple[float, float, float]:
    """(Σ head chunks, Σ lens chunks, the term or 0) as host floats, from one read of the device (one
    synchronisation per step, not one per chunk); added in the chunks' order from 0.0, as float by float (a float32
    is exact in float64, so the sums are those of the per-chunk reads)."""
    parts = [*head_losses, *lens_losses, *([term] if term is not None else [])]
    values = torch.stack([v.double() for v in parts]).tolist() if parts else []
    head, lens = values[: len(head_losses)], values[len(head_losses) : len(head_losses) + len(lens_losses)]
    return sum(head, 0.0), sum(lens, 0.0), values[-1] if term is not None else 0.0


@torch.no_grad()
def evaluate(
    lm: LanguageModel,
    laya: LayaLMHead,
    tuned: TunedLens | None,
    held_out: Iterator[Tensor],
    max_tokens: int,
    lens: str = "tuned",
    positions: int = 0,
    seed: int = 0,
    against: str | None = None,
) -> dict:
    """Held-out figures per token (bits): the LAYA head's and the model's KL and cross-entropy and LAYA's mean α
    per layer on every position; per layer, the logit lens's (``lens`` tuned or logit) and the tuned lens's
    (``lens`` tuned) KL to the final distribution and cross-entropy on at most ``positions`` seeded positions of the
    ``max_tokens`` (``--lens-tokens``, spread over the batches in proportion; 0: every position), each with the
    half-width of its 95 % interval (``*_ci``: normal, over the positions read) — the lenses cost two
    full-vocabulary readouts per layer and position, the head one. Also what the flags read (auditing/flags.py):
    α's collapse summary (``against``: what α was trained to rank) and ``next_token``, the model's own top-1
    accuracy against the most frequent next token's share (under torchrun every rank's positions, gathered)."""
    laya.eval()
    if tuned is not None:
        tuned.eval()
    L = lm.num_layers
    lensed = {"tuned": ("logit", "tuned"), "logit": ("logit",), "none": ()}[lens]
    keys = [f"{name}_{m}" for name in lensed for m in ("kl", "ce")]
    sums = {k: torch.zeros(L, dtype=torch.float64) for k in keys}
    squares = {k: torch.zeros(L, dtype=torch.float64) for k in keys}
    alpha_sum = torch.zeros(L, dtype=torch.float64)
    head = {"laya_kl": 0.0, "laya_ce": 0.0, "last_ce": 0.0, "own_hits": 0.0}
    alphas, next_tokens = [], torch.zeros(lm.readout.vocabulary, dtype=torch.float64)
    n, n_lens = 0, 0
    # the same held-out positions at every epoch, for every training seed and lens: their figures are paired
    generator = torch.Generator().manual_seed(seed)
    for x in progress.track(held_out, "held-out evaluation", unit="batch", of=f"(up to {max_tokens:,} positions)"):
        per_block = x.shape[2] - 1
        share = min(math.ceil(positions * len(x) * per_block / max_tokens), positions - n_lens) if positions else 0
        reads = lensed and (not positions or share > 0)  # the sample already full: this batch's lens is not read
        picked = lens_rows(len(x), per_block, share, generator) if reads else None
        hs, targets = token_states(lm, my_rows(x))  # under torchrun each rank measures its share, summed below
        for rows in chunks(len(targets), lm.readout.vocabulary):
            h, y = hs[rows], targets[rows]
            final_logits = lm.readout(h[:, -1])
            logits, alpha = laya(h)
            kl, ce = kl_and_ce(logits.unsqueeze(1), Reference.of(final_logits), y)
            head["laya_kl"] += float(kl.sum())
            head["laya_ce"] += float(ce.sum())
            head["last_ce"] += float(cross_entropy(final_logits, y).sum())
            head["own_hits"] += float((final_logits.argmax(-1) == y).sum())
            next_tokens += torch.bincount(y.cpu(), minlength=len(next_tokens)).double()
            alpha_sum += alpha.double().sum(0).cpu()
            alphas.append(alpha.float().cpu())
        if reads:
            h_lens = hs if picked is None else hs[picked.to(hs.device)]
            y_lens = targets if picked is None else targets[picked.to(targets.device)]
            _add_lens_figures(lm, tuned, lensed, h_lens, y_lens, sums, squares)
            n_lens += int(all_sum([len(y_lens)])[0])
        n += int(all_sum([len(targets)])[0])
        if n >= max_tokens:
            break
    if n == 0:
        raise LayaError("the held-out text is shorter than one block: no position to evaluate")
    sums = {k: all_sum_(v) for k, v in sums.items()}
    squares = {k: all_sum_(v) for k, v in squares.items()}
    alpha_mean = (all_sum_(alpha_sum) / n).tolist()
    head = dict(zip(head, all_sum(list(head.values()))))
    layers = [{"alpha": alpha_mean[i]} for i in range(L)]
    for k in keys:
        for i, (mean, half) in enumerate(zip(*_mean_and_half_width(sums[k], squares[k], n_lens))):
            layers[i][k], layers[i][f"{k}_ci"] = mean * BITS, half * BITS
    heads = {"laya": {"kl": head["laya_kl"] / n * BITS, "ce": head["laya_ce"] / n * BITS},
             "last": {"kl": 0.0, "ce": head["last_ce"] / n * BITS}}  # fmt: skip
    lens_info = {"kind": lens, "positions": positions, "tokens": n_lens if lensed else 0}
    next_token = _next_token(head["own_hits"], all_sum_(next_tokens), n)
    collapse = collapse_summary(gather_rows(cat_rows(alphas, torch.float32, L)), against)  # every rank's positions
    return {"tokens": n, "tokens_asked": max_tokens, "layers": layers, "heads": heads, "lens": lens_info,
            "alpha_collapse": collapse, "next_token": next_token}  # fmt: skip


def _next_token(own_hits: float, next_tokens: Tensor, n: int) -> dict:
    """The model's own top-1 next-token accuracy on ``n`` positions and the share of their most frequent next token
    (``next_tokens``: the count of each): what a language model's chance flag holds it against (auditing/flags.py)."""
    return {
        "positions": n,
        "model_accuracy": own_hits / n,
        "most_frequent_token": int(next_tokens.argmax()),
        "most_frequent_share": float(next_tokens.max()) / n,
    }


def _add_lens_figures(lm, tuned, lensed, hs: Tensor, targets: Tensor, sums: dict, squares: dict) -> None:
    """Add the lenses' per-layer KL and CE of these positions (``hs`` (N, L, d), their next tokens) to the running
    sums and sums of squares, in chunks of positions so no more than the chunk's logits exist at once."""
    L = lm.num_layers
    for rows in chunks(len(targets), lm.readout.vocabulary * L):
        h, y = hs[rows], targets[rows]
        logit = lens_logits(lm.readout, h).reshape(len(y), L, -1)
        ref = Reference.of(logit[:, -1])  # the logit lens's last layer is the model's own readout
        for name in lensed:
            logits = logit if name == "logit" else lens_logits(lm.readout, tuned.embed(h)).reshape(len(y), L, -1)
            for m, value in zip(("kl", "ce"), kl_and_ce(logits, ref, y)):
                per = value.double().cpu()  # (positions, layers)
                sums[f"{name}_{m}"] += per.sum(0)
                squares[f"{name}_{m}"] += (per**2).sum(0)


def _mean_and_half_width(total: Tensor, squares: Tensor, n: int) -> tuple[list[float], list[float]]:
    """Per layer, the mean of n values from their sum and sum of squares, and the half-width of its normal 95 %
    interval (the sample variance, n − 1)."""
    mean = total / max(n, 1)
    var = (squares / max(n, 1) - mean**2).clamp_min(0) * n / max(n - 1, 1)
    return mean.tolist(), (1.959964 * (var / max(n, 1)).sqrt()).tolist()


class ReferenceSum:
    """r̄_i accumulated from the first training batches of epoch 1 (up to ``--eval-tokens`` positions, the last batch
    whole): the states are already computed for training, so the reference costs no pass of its own."""

    def __init__(self, max_tokens: int):
        self.max_tokens, self.total, self.n = max_tokens, None, 0
        self._seen, self._running = -1, None

    def add(self, hs: Tensor) -> None:
        if self.n >= self.max_tokens:
            return
        s = hs.double().sum(0)
        self.total = s if self.total is None else self.total + s
        self.n += int(all_sum([len(hs)])[0])  # under torchrun each rank sums its share of every batch

    def means(self) -> list[Tensor]:
        if self.n == 0:
            raise LayaError("the training text is shorter than one block")
        return [r.float().cpu() for r in (all_sum_(self.total.clone()) / self.n)]  # clone: callable again

    def running(self, device) -> Tensor:
        """(L, d) r̄ as far as it is summed at this step (the stored one once summing stops): what the terms that
        read r̄ while training use (``--exit-aware``, ``--align-target head|both``). Recomputed only when a batch
        was added, so every rank all-reduces at the same steps."""
        if self.n != self._seen:
            self._seen, self._running = self.n, torch.stack(self.means()).to(device)
        return self._running


def _epoch(
    lm,
    laya,
    tuned,
    corpus,
    req,
    block,
    opt,
    epoch,
    reference: ReferenceSum | None,
    aligned: TokenAlignment | None,
    exit_aware: ExitAware | None = None,
) -> tuple[float, int]:
    laya.train()
    if tuned is not None:
        tuned.train()
    total, steps = 0.0, 0
    t = req.train
    train = batches(lm, corpus, "train", block, t.batch_size, seed=t.seed + epoch)
    generator = torch.Generator().manual_seed(t.seed + 7919 * epoch)  # the lens's positions, alike on every rank
    for term in (aligned, exit_aware):
        if term is not None:
            term.start_epoch(epoch)
    for x in progress.track(train, f"epoch {epoch}", unit="batch", of=f"of {t.batch_size} blocks of {block} tokens"):
        sample = lens_rows(len(x), x.shape[2] - 1, req.lm.lens_sample, generator) if tuned is not None else None
        mine = my_rows(x)
        hs, targets = token_states(lm, mine)
        if reference is not None:
            reference.add(hs)
        align = None
        if aligned is not None:
            align = lambda: aligned.loss(lm.backbone, laya, mine.to(lm.input_device), hs)  # noqa: B023, E731
        truncated = None
        if exit_aware is not None:
            depths = exit_aware.depths(len(x), x.shape[2] - 1, hs.shape[1])
            truncated = (exit_aware.weight, exit_aware.reference(hs.device), depths)
        loss = train_step(laya, tuned, hs, targets, req.lm.objective, opt, t.layer_dropout, sample, align, truncated)
        if not math.isfinite(loss):  # a diverged run keeps nothing: no checkpoint is written (docs/lm.md)
            raise non_finite_loss(t, epoch, f"at batch {steps + 1}")
        total += loss
        steps += 1
    if steps == 0:
        raise LayaError(f"{req.data.name}: the training text is shorter than one block of {block} tokens")
    check_finite_weights([laya, tuned], t, epoch)  # a last step can turn them NaN after a finite loss
    return total / steps, steps


def resolved_lm_request(req: TrainJobSettings) -> TrainJobSettings:
    """A new ``req`` as a language model's training reads it (``req`` is left as it is): its settings checked (a
    classifier's refused in one line: ``TrainJobSettings.validate``), the corpus named, the alignment and exit terms
    resolved to the language model's defaults (``training.defaults``: λ 1 against the network target; a target given
    alone is λ 1), what the head reads resolved. Idempotent: ``laya bench`` resolves its template once, each run
    again."""
    req.validate()
    corpus_path(req.data.name, CORPUS_READER)
    train = resolved_alignment(req.train, "lm", False, "laya", pool="last")
    if train.align_removal not in ("auto", "bypass"):
        raise LayaError(f"--align-removal {train.align_removal}: a language model's layers are removed by bypass "
                        "(the default, auto, or bypass)")  # fmt: skip
    return evolve(req, train=train, head_config=resolved_lm_head(req.head_config))


def train_lm(req: TrainJobSettings, on_epoch: Callable[[LMEpoch], None] | None = None) -> dict:
    """Train the LAYA head and the tuned lens, measure them beside the logit lens and the model, write the
    checkpoint (atomically) and return it."""
    req = resolved_lm_request(req)
    t = req.train
    if req.out:  # the Python API's run writes nothing until the model is saved
        check_writable(req.out)
    corpus = _corpus(req)
    spec = BackboneSpec(req.backbone, layers=list(req.layers), pretrained=req.pretrained is not False, task="lm")
    lm = build_language_model(spec, device_map=req.lm.device_map)
    _with_tokenizer(lm, corpus)
    block = _block_size(req, lm)
    check_blocks(req, lm, corpus, block)  # what can be refused is refused before the start is announced
    progress.log(f"{req.backbone}: starts from {lm.backbone.weights_source}; frozen (its heads train per position)")
    lm.to(t.device)  # a model placed by --device-map stays where it is; the heads sit with its readout
    device = lm.head_device
    torch.manual_seed(t.seed)
    width = int(lm.readout.unembedding.weight.shape[1])
    laya = LayaLMHead(lm.num_layers, width, lm.readout, req.head_config).to(device)
    tuned = TunedLens(lm.num_layers, width, lm.readout).to(device) if req.lm.lens == "tuned" else None
    params = [p for m in (laya, tuned) if m is not None for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=t.lr)
    reference = ReferenceSum(req.lm.eval_tokens)
    aligned = None
    if t.align:
        aligned = TokenAlignment(
            t.align, t.align_scope, t.align_loss, t.seed, t.align_target, reference, sharpness=t.align_sharpness
        )
    if lm.num_layers < 2:  # one layer: no depth to exit at, nothing to truncate (recorded as off)
        req = evolve(req, train=evolve(t, exit_aware=0.0))
        t = req.train
    exit_aware = ExitAware(t.exit_aware, reference, t.seed) if t.exit_aware else None
    terms = (opt, reference, aligned, exit_aware)
    history, metrics, best_state = _epochs(lm, laya, tuned, corpus, req, block, terms, on_epoch)
    laya.load_state_dict(best_state[0], strict=False)
    if tuned is not None:
        tuned.load_state_dict(best_state[1], strict=False)
    # metrics: the best epoch's held-out figures, measured on the weights just restored (not measured again)
    ckpt = lm_checkpoint(lm, laya, tuned, req, block, corpus, history, metrics, reference.means())
    if is_main() and req.out:  # under torchrun every rank holds the same heads; rank 0 writes
        save_checkpoint(ckpt, req.out)
    barrier()
    return ckpt


def _epochs(lm, laya, tuned, corpus, req: TrainJobSettings, block: int, terms, on_epoch) -> tuple[list, dict, tuple]:
    """Every epoch until ``--patience`` epochs did not improve the held-out objective: the history, the best
    epoch's held-out figures and its weights."""
    opt, reference, aligned, exit_aware = terms
    t, settings = req.train, req.lm
    history, metrics, stopping = [], None, EarlyStopping(t.patience, best_accuracy=-math.inf)  # lower is better
    for epoch in epochs(1, t.epochs, stopping):
        start = time.perf_counter()
        summed = reference if epoch == 1 else None
        loss, _ = _epoch(lm, laya, tuned, corpus, req, block, opt, epoch, summed, aligned, exit_aware)
        held_out = batches(lm, corpus, "test", block, t.batch_size)
        val = evaluate(lm, laya, tuned, held_out, settings.eval_tokens, settings.lens, settings.lens_tokens,
                       against=trained_against({"train_config": train_config(req)}))  # fmt: skip
        score = val["heads"]["laya"][settings.objective]
        if not math.isfinite(score):  # finite weights whose held-out figures are not: as diverged
            raise non_finite_loss(t, epoch, "in the held-out evaluation")
        improved = stopping.update(-score, (laya, tuned), _kept_weights)
        record = LMEpoch(epoch, loss, val["heads"]["laya"]["kl"], val["heads"]["laya"]["ce"],
                         time.perf_counter() - start, improved)  # fmt: skip
        history.append(asdict(record))
        if on_epoch:
            on_epoch(record)
        if improved:
            metrics = val
    return history, metrics, stopping.best_model


def _kept_weights(heads: tuple) -> tuple:
    """The LAYA head's and the tuned lens's trained weights, copied (deepcopy: ``.cpu()`` aliases)."""
    laya, tuned = heads
    return copy.deepcopy(stored_weights(laya)), tuned and copy.deepcopy(stored_weights(tuned))


def train_config(req: TrainJobSettings) -> dict:
    """The training options a checkpoint records (``train_config``; ``laya bench --task lm`` reuses a checkpoint
    whose record matches): the settings a language model's training reads, resolved."""
    t, settings, data = req.train, req.lm, req.data
    config = {
        "backbone": req.backbone, "dataset": data.name, "text_column": data.text_column, "encoding": data.encoding,
        "block_size": settings.block_size, "batch_size": t.batch_size, "epochs": t.epochs, "patience": t.patience,
        "lr": t.lr, "objective": settings.objective, "lens": settings.lens, "lens_sample": settings.lens_sample,
        "lens_tokens": settings.lens_tokens, "eval_tokens": settings.eval_tokens, "layer_dropout": t.layer_dropout,
        "seed": t.seed, "device": t.device, "device_map": settings.device_map, "layers": list(req.layers),
        "pretrained": req.pretrained is not False,
    }  # fmt: skip
    if t.align:  # no term: recorded as before it existed (an older record still compares equal)
        config |= {"align": t.align, "align_target": t.align_target, "align_loss": t.align_loss,
                   "align_scope": t.align_scope}  # fmt: skip
        if t.align_sharpness != 1.0:  # likewise: only where it is not the ranking loss it always was
            config["align_sharpness"] = t.align_sharpness
    if t.exit_aware:  # likewise
        config["exit_aware"] = t.exit_aware
    return config | {"out": str(req.out)}


def lm_checkpoint(
    lm, laya, tuned, req: TrainJobSettings, block: int, corpus: Corpus, history, metrics, reference
) -> dict:
    """The checkpoint of ``--task lm`` (docs/checkpoint.md): the model by name and SHA-256 (never its weights), the
    two heads' weights without the model's readout, the held-out figures."""
    backbone = lm.backbone
    return {
        "task": "lm",
        "backbone": {
            "spec": backbone.spec.to_dict(),
            "weights": None,
            "source": backbone.weights_source,
            "sha256": lm.sha256,
            "input": backbone.adapter.record(),
            "eos_id": lm.eos_id,
        },
        "layers": list(backbone.layer_names),
        "dims": [int(r.shape[-1]) for r in reference],
        "head": {"kind": "laya", "config": req.head_config.to_dict(), "weights": stored_weights(laya)},
        "tuned_lens": {"weights": stored_weights(tuned)} if tuned is not None else None,  # --lens logit|none
        "lens": {"kind": req.lm.lens, "sample": req.lm.lens_sample, "tokens": req.lm.lens_tokens},
        "classes": [],
        "dataset": {
            "name": req.data.name,
            "source": str(corpus.root),
            "block_size": block,
            "objective": req.lm.objective,
        },  # fmt: skip
        "reference": reference,
        "history": history,
        "metrics": metrics,
        "train_config": train_config(req),
        "question": question_of_training(train_config(req), "lm").record(),  # what α was trained to follow
        **({"options": req.command_line} if req.command_line else {}),
    }
