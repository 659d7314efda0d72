"""Small, real, generated inputs: an image folder of drawn shapes, a seeded head with features, a
briefly trained digits checkpoint, a tiny causal language model with its corpus, a tiny BERT with a made-up csv of
three topics, a checkpoint with one byte of its head flipped. Used by the tests (through ``helpers``), by the speed
and fault benchmarks, by ``tools/snapshot.py``, and by anyone who wants a laya model to try something on without
downloading data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def make_image_folder(
    root: Path,
    classes: Sequence[str] = ("circle", "square", "cross"),
    per_class: int = 12,
    size: int = 40,
    seed: int = 0,
) -> Path:
    """Draw a small, learnable ImageFolder tree: one simple shape per class, random placement."""
    from PIL import Image, ImageDraw

    root = Path(root)
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            im = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 60, 3)))
            d = ImageDraw.Draw(im)
            x, y = rng.integers(4, size // 2, 2)
            s = int(rng.integers(size // 4, size // 2))
            colour = (230, 200, 40)
            if c % 3 == 0:
                d.ellipse([x, y, x + s, y + s], fill=colour)
            elif c % 3 == 1:
                d.rectangle([x, y, x + s, y + s], fill=colour)
            else:
                d.line([x, y, x + s, y + s], fill=colour, width=3)
                d.line([x, y + s, x + s, y], fill=colour, width=3)
            im.save(root / name / f"{i:03d}.png")
    return root


def make_head_and_features(
    kind: str = "laya", seed: int = 0, batch: int = 7, dims=(12, 8, 6, 10), num_classes: int = 5
):
    """A small seeded head with random layer features and an ablation reference: (head, feats, ref)."""
    import torch

    from laya_cli.model.heads import build_head
    from laya_cli.model.settings import HeadSettings

    torch.manual_seed(seed)
    head = build_head(kind, list(dims), num_classes, HeadSettings(d_star=8, score_hidden=16)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    feats = [torch.randn(batch, d, generator=g) for d in dims]
    ref = [torch.randn(d, generator=g) * 0.3 for d in dims]
    return head, feats, ref


def make_collapsed_head(
    seed: int = 0,
    batch: int = 256,
    dims=(12, 8, 6, 10, 9, 7),
    num_classes: int = 5,
    collapse: float = 28.0,
    ignored=None,
):
    """``make_head_and_features`` with α collapsed off the ``ignored`` layers (default: all but the last, as a
    trained head's α often sits on one layer: a real all-MiniLM-L6-v2's, issue #39). Their scores are lowered by
    ``collapse``, so their α_i ≈ exp(−collapse/τ) × the others' (≈ 1e-8 at 28 and τ = 1.5), and the scorer stops
    reading them, so their leave-one-layer-out effects Δ_i are float32 rounding around ~1e-8. ``collapse`` = 0:
    the ordinary seeded head. (head, feats, ref)."""
    import torch

    head, feats, ref = make_head_and_features("laya", seed, batch, dims, num_classes)
    ignored = range(len(dims) - 1) if ignored is None else ignored
    d = head.adapters[0].out_features
    with torch.no_grad():
        for i in ignored if collapse else ():
            head.scorer[-1].bias[i] -= collapse
            head.scorer[0].weight[:, i * d : (i + 1) * d] = 0  # nor do the other layers' α read it
    return head, feats, ref


def train_digits(
    out: Path,
    head: str = "laya",
    epochs: int = 8,
    seed: int = 0,
    patience: int | None = None,
    d_star: int = 96,
    score_hidden: int = 192,
    align: float | None = 0.0,  # 0: no term (not the kind's default: None)
    stop_on: str = "accuracy",
    **extra,
) -> Path:
    """Train the paper MLP + a head on scikit-learn's digits, quietly; returns the checkpoint path."""
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.settings import HeadSettings
    from laya_cli.runtime import progress
    from laya_cli.training.job import train
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    req = TrainJobSettings(
        head=head,
        data=DataSettings("digits", seed=seed),
        head_config=HeadSettings(d_star=d_star, score_hidden=score_hidden),
        train=TrainingSettings(epochs=epochs, seed=seed, patience=patience or epochs, align=align, stop_on=stop_on),
        out=str(out),
        **extra,
    )
    with progress.enabled(False):
        train(req)
    return Path(out)


def frozen_cnn_and_images(n: int = 40, size: int = 16, seed: int = 0):
    """The built-in cnn (seeded, eval mode) with n seeded random uint8 images and labels 0,1,2,…:
    (backbone, images, labels). Feature extraction on it is fast and deterministic."""
    import torch

    from laya_cli.backbones.build import BackboneSpec, build_backbone

    torch.manual_seed(seed)
    backbone = build_backbone(BackboneSpec("cnn", in_channels=3, image_size=(size, size))).eval()
    g = torch.Generator().manual_seed(seed + 1)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return backbone, images, torch.arange(n) % 3


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` short English-like sentences from a small grammar (seeded): text for language-model tests."""
    import random

    rng = random.Random(seed)
    nouns = "cat dog bird tree river stone house child song light".split()
    verbs = "sees likes follows finds carries hears".split()
    adjs = "small old green quiet bright heavy".split()
    return [
        f"the {rng.choice(adjs)} {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)} near the "
        f"{rng.choice(adjs)} {rng.choice(nouns)}."
        for _ in range(n)
    ]


def make_causal_lm(folder: Path, texts: list[str], layers: int = 4, width: int = 32, init: float = 0.3) -> Path:
    """A GPT-2 of ``layers`` × ``width`` with random weights (std ``init``: peaked next-token distributions that
    differ by layer) and a byte-level BPE tokenizer learnt on ``texts``, saved with ``save_pretrained``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=320, special_tokens=["<eos>"], initial_alphabet=alphabet)
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    config = GPT2Config(vocab_size=len(fast), n_layer=layers, n_embd=width, n_head=2, n_positions=64,
                        initializer_range=init, eos_token_id=0, bos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def make_lm_folder(root: Path, texts: list[str], train: int) -> Path:
    """``root/model`` (``make_causal_lm`` on ``texts``) and ``root/corpus`` (train.txt: the first ``train`` texts,
    test.txt: the rest): what ``laya train --task lm`` reads."""
    make_causal_lm(root / "model", texts)
    (root / "corpus").mkdir()
    (root / "corpus" / "train.txt").write_text("\n".join(texts[:train]) + "\n")
    (root / "corpus" / "test.txt").write_text("\n".join(texts[train:]) + "\n")
    return root


TOPICS = {
    "sport": "ball goal team match score player coach race win run".split(),
    "food": "bread cheese apple soup rice pasta salt sugar bake cook".split(),
    "tech": "computer code network chip data server cloud robot byte laser".split(),
}


def topic_texts(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` made-up (text, topic) rows of three topics, seeded: a small text classification data set."""
    import random

    rng, filler = random.Random(seed), "the a of and with in on very some".split()
    rows = []
    for i in range(n):
        topic = list(TOPICS)[i % len(TOPICS)]
        words = rng.choices(TOPICS[topic], k=5) + rng.choices(filler, k=3)
        rng.shuffle(words)
        rows.append((" ".join(words), topic))
    return rows


def tiny_bert(root: Path) -> Path:
    """``root/bert`` (a 3-layer BERT made from a config, seeded: no download) and ``root/data`` (train.csv and
    test.csv of ``topic_texts``): a text model and its data set for ``--backbone hf:`` and ``--dataset csv:``."""
    import csv

    import transformers

    config = transformers.BertConfig(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    transformers.set_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(root / "bert")
    (root / "data").mkdir(exist_ok=True)
    for name, rows in (("train", topic_texts(150, 0)), ("test", topic_texts(24, 1))):
        with open(root / "data" / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(rows)
    return root


def flip_head_byte(src: Path, dst: Path) -> Path:
    """``dst``: the checkpoint ``src`` with one byte flipped in the middle of its head's largest weight tensor (found
    by its bytes in the file: a torch checkpoint stores tensors uncompressed), the file otherwise unchanged."""
    import torch

    data = bytearray(Path(src).read_bytes())
    weights = torch.load(src, map_location="cpu", weights_only=True)["head"]["weights"]
    raw = max((t.contiguous().numpy().tobytes() for t in weights.values()), key=len)
    at = data.find(raw)
    assert at >= 0 and data.find(raw, at + 1) < 0, "the tensor's bytes are not found once in the file"
    data[at + len(raw) // 2] ^= 0xFF
    Path(dst).write_bytes(bytes(data))
    return Path(dst)
