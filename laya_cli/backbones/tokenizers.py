"""Text input: a model's tokenizer, one learnt on a training split when it has none, and token batches.

Texts travel through laya as B×2×L integer tensors (``encode``): row 0 the token ids, row 1 the attention
mask, every text right-padded and truncated to ``TextInput.max_length`` (the model is fed each batch cut after
its last real token: ``TokenAdapter.trim``). The tokenizer travels as its
``tokenizers`` JSON inside ``TextInput`` (and so inside the checkpoint): an audit needs no hub.
"""

from __future__ import annotations

import torch
from torch import nn

from ..runtime.errors import LayaError
from .spec import TextInput

DEFAULT_MAX_LENGTH = 128


def _positions(model: nn.Module) -> int | None:
    cfg = model.config
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def text_input_from(model: nn.Module, max_length: int | None, where: str | None) -> TextInput:
    """A text model's input without a tokenizer yet; ``max_length`` checked against its positions."""
    positions = _positions(model)
    name = f"hf:{where}" if where else type(model).__name__
    if max_length is not None and max_length < 1:
        raise LayaError(f"--max-length must be at least 1, got {max_length}")
    if max_length is not None and positions is not None and max_length > positions:
        raise LayaError(f"--max-length {max_length} is beyond {name}'s {positions} positions")
    length = max_length or min(DEFAULT_MAX_LENGTH, positions or DEFAULT_MAX_LENGTH)
    return TextInput(length, vocab_size=vocabulary(model))


def input_embeddings(model: nn.Module) -> nn.Module | None:
    """The model's token embedding table, None where it has none a tokenizer can index (``_table``)."""
    return _table(model)[0]


def table_rows(table) -> int | None:
    """How many token ids an embedding table indexes: an ``nn.Embedding``'s ``num_embeddings``, or the rows of the
    2-D ``weight`` of a module that embeds ids as one does (I-BERT's ``QuantEmbedding``); None for anything else."""
    if not isinstance(table, nn.Module):
        return None
    rows = getattr(table, "num_embeddings", None)
    if isinstance(rows, int):
        return rows
    weight = getattr(table, "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) and weight.ndim == 2 else None


def _table(model: nn.Module) -> tuple[nn.Module | None, str]:
    """(the token embedding table, why there is none). The one the model names (``get_input_embeddings``), or where
    it names none (not implemented: Dia's encoder, FastSpeech 2 with its vocoder) the one ``nn.Embedding`` of its
    config's ``vocab_size`` rows (a sub-config's, where the config holds none)."""
    try:
        table = model.get_input_embeddings()
    except (NotImplementedError, AttributeError):
        return _embedding_of_vocabulary(model)
    if table_rows(table) is None:
        what = type(table).__name__
        return None, f"its input embedding ({what}) is no table indexed by token ids (several tables, codebooks…)"
    return table, ""


def _vocab_size(config) -> int | None:
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        return vocab
    subs = {_vocab_size(getattr(config, k, None)) for k in (getattr(config, "sub_configs", None) or {})} - {None}
    return subs.pop() if len(subs) == 1 else None


def _embedding_of_vocabulary(model: nn.Module) -> tuple[nn.Module | None, str]:
    vocab = _vocab_size(getattr(model, "config", None))
    tables = [n for n, m in model.named_modules() if isinstance(m, nn.Embedding) and m.num_embeddings == vocab]
    if len(tables) == 1:
        return model.get_submodule(tables[0]), ""
    if vocab is None:
        return None, "it names none (get_input_embeddings) and its config no vocab_size"
    many = f"{len(tables)} ({', '.join(tables[:2])}…)" if tables else "none"
    return None, f"it names none (get_input_embeddings) and {many} nn.Embedding has its config's {vocab} rows"


def vocabulary(model: nn.Module) -> int:
    """How many token ids the model embeds; a one-line error for a text model without a token embedding table."""
    table, why = _table(model)
    if table is None:
        raise LayaError(f"{type(model).__name__} has no token embedding table laya can feed: {why}")
    return int(table_rows(table))


def given_text_input(model: nn.Module, tokenizer, max_length: int | None) -> TextInput:
    """A text model attached in Python: its input from the tokenizer the user passes (or none: their loader
    then yields token ids)."""
    text = text_input_from(model, max_length, None)
    if tokenizer is None:
        return text
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "to_str"):
        raise LayaError(
            "tokenizer must be a fast tokenizer (transformers) or a tokenizers.Tokenizer, "
            f"got {type(tokenizer).__name__}"
        )
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None) or 0
    return set_tokenizer(
        text, backend.to_str(), int(pad), f"the tokenizer given to attach ({type(tokenizer).__name__})"
    )


def set_tokenizer(text: TextInput, tokenizer_json: str, pad_id: int, source: str) -> TextInput:
    from tokenizers import Tokenizer

    size = Tokenizer.from_str(tokenizer_json).get_vocab_size(with_added_tokens=True)
    if text.vocab_size and size > text.vocab_size:
        raise LayaError(
            f"{source} has {size} token ids but the model embeds only {text.vocab_size}: "
            "the tokenizer does not match the model's vocabulary"
        )
    text.tokenizer, text.pad_id, text.source = tokenizer_json, pad_id, source
    return text


def train_tokenizer(text: TextInput, texts: list[str], what: str) -> TextInput:
    """A word-level tokenizer learnt on ``texts`` (the training split), for models built from a config alone:
    lower-cased BERT pre-tokenisation, the most frequent words up to the model's vocabulary size (ties in
    alphabetical order), [UNK] for the rest, [CLS] … [SEP] around each text. Deterministic — the same texts
    give the same tokenizer on every run and rank (the ``tokenizers`` trainers break ties by hash order,
    which changes from run to run). Stored in the checkpoint."""
    from collections import Counter

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    if text.vocab_size and text.vocab_size < len(specials) + 2:
        raise LayaError(f"the model embeds only {text.vocab_size} tokens: too few to train a tokenizer for it")
    normalizer, splitter = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts = Counter(w for t in texts for w, _ in splitter.pre_tokenize_str(normalizer.normalize_str(t)))
    room = (text.vocab_size or 30000) - len(specials)
    words = sorted(counts, key=lambda w: (-counts[w], w))[:room]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + words)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, splitter
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    source = f"word-level vocabulary of {what} ({len(words)} of {len(counts)} words)"
    return set_tokenizer(text, tok.to_str(), 0, source)


def encode(text: TextInput, texts: list[str]) -> torch.Tensor:
    """N×2×L int32 (ids, attention mask): right-padded with ``pad_id`` and truncated to ``max_length``."""
    from tokenizers import Tokenizer

    if not text.tokenizer:
        raise LayaError("this text backbone has no tokenizer yet")
    tok = Tokenizer.from_str(text.tokenizer)
    tok.enable_truncation(text.max_length)
    tok.enable_padding(length=text.max_length, pad_id=text.pad_id, direction="right")
    out = tok.encode_batch([str(t) for t in texts])
    ids = torch.tensor([e.ids for e in out], dtype=torch.int32).reshape(len(texts), text.max_length)
    mask = torch.tensor([e.attention_mask for e in out], dtype=torch.int32).reshape(len(texts), text.max_length)
    return torch.stack([ids, mask], dim=1)
