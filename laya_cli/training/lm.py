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
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ..backbones.causal import LanguageModel, build_language_model
from ..backbones.spec import BackboneSpec
from ..backbones.tokens import set_tokenizer, train_tokenizer
from ..data.corpus import Corpus, open_corpus
from ..features.positions import batches, layer_means, token_states
from ..model.checkpoint import save_checkpoint
from ..model.lenses import BITS, LayaLM, TunedLens, chunks, cross_entropy, kl_to, objective, stored_weights
from ..runtime import progress
from ..runtime.config import HeadConfig
from ..runtime.distributed import all_sum, all_sum_, barrier, is_main, my_rows, sum_gradients
from ..runtime.errors import LayaError, match_choice
from .shaping import layer_dropout_mask

OBJECTIVES = ("kl", "ce")


@dataclass
class LMRequest:
    backbone: str
    dataset: str  # text:PATH
    out: Path
    text_column: str | None = None
    encoding: str | None = None
    block_size: int | None = None  # None: min(128, the model's positions)
    batch_size: int = 16
    epochs: int = 1
    patience: int = 5
    lr: float = 1e-3
    objective: str = "kl"
    eval_tokens: int = 20_000
    layer_dropout: float = 0.0  # the chance each layer is left out of a position's α while training (never all)
    seed: int = 1337
    device: str = "cpu"
    device_map: str | None = None  # --device-map: transformers places the frozen model (docs/lm.md)
    layers: list[str] = field(default_factory=list)
    pretrained: bool = True
    head: HeadConfig = field(default_factory=HeadConfig)
    command_line: dict | None = None


@dataclass
class LMEpoch:
    epoch: int
    loss: float  # the training objective per token (nats), LAYA and tuned lens summed
    val_kl_bits: float
    val_ce_bits: float
    seconds: float
    best: bool


def _corpus(req: LMRequest) -> Corpus:
    prefix, _, path = req.dataset.partition(":")
    if prefix != "text" or not path:
        raise LayaError(f"--task lm reads a text corpus: --dataset text:PATH, not {req.dataset}")
    return open_corpus(path, req.text_column, req.encoding)


def _with_tokenizer(lm: LanguageModel, corpus: Corpus) -> None:
    """A model saved without a tokenizer gets a word-level one learnt on (the first 50,000 of) its training text."""
    text = lm.backbone.adapter.text
    if text.tokenizer:
        return
    docs = list(itertools.islice(corpus.documents("train"), 50_000))
    trained = train_tokenizer(text, docs, "the training text")
    set_tokenizer(text, trained.tokenizer, trained.pad_id, trained.source)


def _block_size(req: LMRequest, lm: LanguageModel) -> int:
    positions = lm.backbone.adapter.text.max_length
    block = req.block_size or min(128, positions)
    if not 2 <= block <= positions:
        raise LayaError(f"--block-size {block}: the model reads 2 to {positions} positions")
    return block


def train_step(laya: LayaLM, tuned: TunedLens, hs: Tensor, targets: Tensor, loss_of, opt, dropout: float) -> float:
    """One optimiser step on a batch of positions; backward chunk by chunk (never N × V logits at once).
    ``dropout``: each position's α over a random subset of the layers (``--layer-dropout``), as for classifiers."""
    opt.zero_grad(set_to_none=True)
    total, n = 0.0, all_sum([len(targets)])[0]  # under torchrun: this rank's positions of one global batch
    for rows in chunks(len(targets), laya.readout.vocabulary):
        h, y = hs[rows], targets[rows]
        with torch.no_grad():
            final = F.log_softmax(laya.readout(h[:, -1]).float(), -1)
        mask = layer_dropout_mask(len(y), h.shape[1], dropout, device=h.device) if dropout else None
        loss = loss_of(laya(h, mask)[0], final, y).sum()
        loss = loss + sum(loss_of(tuned.layer_logits(h, i), final, y).sum() for i in range(h.shape[1]))
        (loss / n).backward()
        total += float(loss.detach())
    sum_gradients([p for m in (laya, tuned) for p in m.parameters() if p.requires_grad])
    opt.step()
    return all_sum([total])[0] / n


@torch.no_grad()
def evaluate(lm: LanguageModel, laya: LayaLM, tuned: TunedLens, held_out: Iterator[Tensor], max_tokens: int) -> dict:
    """Held-out figures per token (bits): per layer, the logit and tuned lenses' KL to the final distribution and
    cross-entropy; the LAYA head's and the model's; LAYA's mean α per layer."""
    laya.eval(), tuned.eval()
    L = lm.num_layers
    sums = {k: torch.zeros(L, dtype=torch.float64) for k in ("logit_kl", "logit_ce", "tuned_kl", "tuned_ce", "alpha")}
    head = {"laya_kl": 0.0, "laya_ce": 0.0, "last_ce": 0.0}
    n = 0
    for x in progress.track(held_out, "held-out evaluation"):
        hs, targets = token_states(lm, my_rows(x))  # under torchrun each rank measures its share, summed below
        for rows in chunks(len(targets), lm.readout.vocabulary):
            h, y = hs[rows], targets[rows]
            final_logits = lm.readout(h[:, -1])
            final = F.log_softmax(final_logits.float(), -1)
            for i in range(L):
                for lens, logits in (("logit", lm.readout(h[:, i])), ("tuned", tuned.layer_logits(h, i))):
                    sums[f"{lens}_kl"][i] += float(kl_to(final, logits).sum())
                    sums[f"{lens}_ce"][i] += float(cross_entropy(logits, y).sum())
            logits, alpha = laya(h)
            head["laya_kl"] += float(kl_to(final, logits).sum())
            head["laya_ce"] += float(cross_entropy(logits, y).sum())
            head["last_ce"] += float(cross_entropy(final_logits, y).sum())
            sums["alpha"] += alpha.double().sum(0).cpu()
        n += int(all_sum([len(targets)])[0])
        if n >= max_tokens:
            break
    if n == 0:
        raise LayaError("the held-out text is shorter than one block: no position to evaluate")
    sums = {k: all_sum_(v) for k, v in sums.items()}
    head = dict(zip(head, all_sum(list(head.values()))))
    per_layer = {k: (v / n * (1 if k == "alpha" else BITS)).tolist() for k, v in sums.items()}
    layers = [{k: per_layer[k][i] for k in per_layer} for i in range(L)]
    heads = {"laya": {"kl": head["laya_kl"] / n * BITS, "ce": head["laya_ce"] / n * BITS},
             "last": {"kl": 0.0, "ce": head["last_ce"] / n * BITS}}  # fmt: skip
    return {"tokens": n, "layers": layers, "heads": heads}


def _epoch(lm, laya, tuned, corpus, req, block, opt, epoch) -> tuple[float, int]:
    laya.train(), tuned.train()
    loss_of, total, steps = objective(req.objective), 0.0, 0
    train = batches(lm, corpus, "train", block, req.batch_size, seed=req.seed + epoch)
    for x in progress.track(train, f"epoch {epoch}"):
        hs, targets = token_states(lm, my_rows(x))
        total += train_step(laya, tuned, hs, targets, loss_of, opt, req.layer_dropout)
        steps += 1
    if steps == 0:
        raise LayaError(f"{req.dataset}: the training text is shorter than one block of {block} tokens")
    return total / steps, steps


def train_lm(req: LMRequest, on_epoch: Callable[[LMEpoch], None] | None = None) -> dict:
    """Train the LAYA head and the tuned lens, measure them beside the logit lens and the model, write the
    checkpoint (atomically) and return it."""
    req.objective = match_choice("--objective", req.objective, OBJECTIVES)
    if not 0 <= req.layer_dropout < 1:
        raise LayaError(f"--layer-dropout must be in [0, 1), got {req.layer_dropout}")
    corpus = _corpus(req)
    spec = BackboneSpec(req.backbone, layers=list(req.layers), pretrained=req.pretrained, task="lm")
    lm = build_language_model(spec, device_map=req.device_map)
    _with_tokenizer(lm, corpus)
    block = _block_size(req, lm)
    lm.to(req.device)  # a model placed by --device-map stays where it is; the heads sit with its readout
    device = lm.head_device
    torch.manual_seed(req.seed)
    width = int(lm.readout.unembedding.weight.shape[1])
    laya = LayaLM(lm.num_layers, width, lm.readout, req.head.validate()).to(device)
    tuned = TunedLens(lm.num_layers, width, lm.readout).to(device)
    params = [p for m in (laya, tuned) for p in m.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=req.lr)
    history, best, best_state, metrics, stale = [], None, None, None, 0
    for epoch in range(1, req.epochs + 1):
        start = time.perf_counter()
        loss, _ = _epoch(lm, laya, tuned, corpus, req, block, opt, epoch)
        val = evaluate(lm, laya, tuned, batches(lm, corpus, "test", block, req.batch_size), req.eval_tokens)
        score = val["heads"]["laya"][req.objective]
        improved = best is None or score < best
        record = LMEpoch(epoch, loss, val["heads"]["laya"]["kl"], val["heads"]["laya"]["ce"],
                         time.perf_counter() - start, improved)  # fmt: skip
        history.append(asdict(record))
        if on_epoch:
            on_epoch(record)
        if improved:
            best, best_state, metrics, stale = (
                score,
                (copy.deepcopy(stored_weights(laya)), copy.deepcopy(stored_weights(tuned))),  # .cpu() may alias
                val,
                0,
            )
        else:
            stale += 1
            if stale >= req.patience:
                break
    laya.load_state_dict(best_state[0], strict=False)
    tuned.load_state_dict(best_state[1], strict=False)
    # metrics: the best epoch's held-out figures, measured on the weights just restored (not measured again)
    reference = layer_means(lm, batches(lm, corpus, "train", block, req.batch_size), req.eval_tokens)
    ckpt = lm_checkpoint(lm, laya, tuned, req, block, corpus, history, metrics, reference)
    if is_main():  # under torchrun every rank holds the same heads; rank 0 writes
        save_checkpoint(ckpt, req.out)
    barrier()
    return ckpt


def train_config(req: LMRequest) -> dict:
    """The training options a checkpoint records (``train_config``; ``laya bench --task lm`` reuses a checkpoint
    whose record matches)."""
    return {k: v for k, v in asdict(req).items() if k not in ("head", "out", "command_line")} | {"out": str(req.out)}


def lm_checkpoint(lm, laya, tuned, req: LMRequest, block: int, corpus: Corpus, history, metrics, reference) -> dict:
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
        "head": {"kind": "laya", "config": req.head.to_dict(), "weights": stored_weights(laya)},
        "tuned_lens": {"weights": stored_weights(tuned)},
        "classes": [],
        "dataset": {"name": req.dataset, "source": str(corpus.root), "block_size": block, "objective": req.objective},
        "reference": reference,
        "history": history,
        "metrics": metrics,
        "train_config": train_config(req),
        **({"options": req.command_line} if req.command_line else {}),
    }
