"""Positions of a causal language model as the LM heads read them: packed text blocks in, every layer's state at
every position that has a next token out, (N, L, d), with that token (N,)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from ..backbones.lm import LanguageModel
from ..data.corpus import Corpus, block_batches, token_blocks
from ..runtime.device import autocast
from ..runtime.distributed import all_sum, all_sum_, my_rows
from ..runtime.errors import LayaError


def batches(lm: LanguageModel, corpus: Corpus, split: str, block: int, size: int, seed=None) -> Iterator[Tensor]:
    blocks = token_blocks(corpus.documents(split), lm.backbone.adapter.text.tokenizer, block, lm.eos_id)
    return block_batches(blocks, size, seed)


@torch.no_grad()
def token_states(lm: LanguageModel, x: Tensor) -> tuple[Tensor, Tensor]:
    """hs (N, L, d): every layer's state at every position that has a next token; targets (N,): that token. The
    frozen model runs under bf16 autocast on CUDA (``runtime.device.autocast``); the states come back float32."""
    x = x.to(lm.input_device)
    if not len(x):  # a rank's share of a batch smaller than the ranks (torchrun)
        width = lm.readout.unembedding.weight.shape[1]
        return torch.zeros(0, lm.num_layers, width, device=lm.head_device), torch.zeros(0, dtype=torch.long)
    top, vocabulary = int(x[:, 0].max()), lm.readout.vocabulary
    if top >= vocabulary:  # an embedding lookup out of range is an IndexError deep in torch: say which id, once
        raise LayaError(
            f"token id {top} is outside the model's vocabulary of {vocabulary}: its tokenizer or its eos_token_id "
            "does not match the model"
        )
    with autocast(x.device):
        states = torch.stack([h.float().to(lm.head_device) for h in lm.backbone.activations(x)], dim=2)  # B,T,L,d
    hs = states[:, :-1].reshape(-1, states.shape[2], states.shape[3])
    return hs, x[:, 0, 1:].reshape(-1).long()


@torch.no_grad()
def layer_means(lm: LanguageModel, train: Iterator[Tensor], max_tokens: int) -> list[Tensor]:
    """r̄_i: each layer's mean state over the positions of the first whole training batches, until they reach
    ``max_tokens`` positions (``--eval-tokens``; the last batch is taken whole) — the reference that replaces a
    removed or not-yet-computed layer (early exit, audits)."""
    total, n = None, 0
    for x in train:
        hs, _ = token_states(lm, my_rows(x))  # under torchrun each rank sums its share of every batch
        total = hs.double().sum(0) if total is None else total + hs.double().sum(0)
        n += int(all_sum([len(hs)])[0])
        if n >= max_tokens:
            break
    if n == 0:
        raise LayaError("the training text is shorter than one block")
    return [r.float().cpu() for r in (all_sum_(total) / n)]
