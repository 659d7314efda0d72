"""Text datasets: labelled strings, split as images are, tokenised by the backbone's own tokenizer.

Sources: ``wordnet-supersenses`` (WordNet's glosses labelled with their lexicographer file, read from
Debian's ``wordnet-base`` files), and a text column of ``csv:``, ``jsonl:``, ``parquet:`` and ``hf-disk:``
data (``--text-column``/``--label-column``). A folder holding ``train.*`` and ``test.*`` files (or a
``DatasetDict`` with train and test splits) gives the official split; one file is split as images are
(stratified 20% test, seed 0; 10% of the rest for validation). Only the two columns are read into memory
(strings are small next to the images the image shards stream).

``tokenize_splits`` turns the strings into B×2×L token batches (ids, attention mask) once the backbone,
and so its tokenizer, is known: ``TokenDataset`` keeps the strings beside them for the report's explorer.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..runtime.errors import LayaError
from ..runtime.fileio import digest
from .settings import DataSettings
from .shards import _labels_to_names
from .splits import TEST_SPLIT_SEED, DataDirMissing, DataSplits, ImageTensorDataset, _finish, stratified_split
from .textfiles import read_files, read_hf_disk

WORDNET_DIRS = (Path("/usr/share/wordnet"), Path("/usr/local/share/wordnet"))
# lexnames(5WN): the lexicographer files, numbered as the data files' lex_filenum field.
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive "
    "noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation "
    "noun.shape noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception "
    "verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")


class TextDataset(Dataset):
    """Strings with integer labels (before tokenisation)."""

    modality = "text"

    def __init__(self, texts: list[str], labels: Tensor):
        self.texts, self.labels = list(texts), labels.long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.texts[i], self.labels[i]

    def subset(self, index: Tensor) -> TextDataset:
        return TextDataset([self.texts[int(i)] for i in index], self.labels[index])


class TokenDataset(ImageTensorDataset):
    """Tokenised texts: N×2×L integer ``images`` (ids, attention mask) and the strings they came from."""

    modality = "text"

    def __init__(self, tokens: Tensor, labels: Tensor, texts: list[str]):
        super().__init__(tokens, labels)
        self.texts = list(texts)

    def subset(self, index: Tensor) -> TokenDataset:
        return TokenDataset(self.images[index], self.labels[index], [self.texts[int(i)] for i in index])


# --------------------------------------------------------------------------- WordNet


def _wordnet_dir(req: DataSettings) -> Path:
    if req.data_dir:
        root = Path(req.data_dir).expanduser()
        if not (root / "data.noun").is_file():
            raise DataDirMissing(f"--data-dir {root} holds no WordNet data files (data.noun, data.verb, …)")
        return root
    env = os.environ.get("WNSEARCHDIR")
    for root in ([Path(env)] if env else []) + list(WORDNET_DIRS):
        if (root / "data.noun").is_file():
            return root
    raise LayaError(
        "WordNet's data files are not installed: apt-get install wordnet-base (Debian/Ubuntu), or pass "
        "--data-dir with a folder holding data.noun, data.verb, data.adj and data.adv"
    )


def read_wordnet(root: Path) -> tuple[list[str], list[int]]:
    """(gloss, lex_filenum) of every synset in the data files (wndb(5WN): ``offset lex_filenum ss_type … | gloss``)."""
    texts, labels = [], []
    for name in WORDNET_FILES:
        path = root / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue  # the licence header
                fields, _, gloss = line.partition("|")
                parts = fields.split()
                if len(parts) < 3 or not parts[1].isdigit() or not gloss.strip():
                    continue
                texts.append(gloss.strip())
                labels.append(int(parts[1]))
    if not texts:
        raise LayaError(f"no synsets in the WordNet files of {root}")
    return texts, labels


def load_wordnet_supersenses(req: DataSettings) -> DataSplits:
    root = _wordnet_dir(req)
    texts, lex = read_wordnet(root)
    used = sorted(set(lex))
    classes = [LEXNAMES[i] if i < len(LEXNAMES) else f"lex{i}" for i in used]
    labels = torch.tensor([used.index(v) for v in lex])
    stamp = digest(files=[(f, (root / f).stat().st_size) for f in WORDNET_FILES if (root / f).is_file()])
    return _text_splits(TextDataset(texts, labels), None, classes, req, f"wordnet-supersenses:{stamp}")


# --------------------------------------------------------------------------- columns of files


def load_text_columns(req: DataSettings) -> DataSplits:
    """``csv:``/``jsonl:``/``parquet:``/``hf-disk:`` PATH with a text column."""
    kind, _, path = req.name.partition(":")
    root = Path(path).expanduser()
    text_column, label_column = req.text_column or "text", req.label_column
    declared = None
    if kind == "hf-disk":
        parts, declared = read_hf_disk(root, text_column, label_column)
    else:
        parts = read_files(kind, root, text_column, label_column, req.encoding)
    for name, texts, labels in parts:
        _check_cells(f"{root} ({name})" if name != "all" else str(root), texts, labels, text_column, label_column)
    names, classes = _labels_to_names([v for _, _, labels in parts for v in labels], declared)
    index = {c: i for i, c in enumerate(classes)}
    ys = torch.tensor([index[n] for n in names])
    n_train = len(parts[0][1])
    train = TextDataset([str(t) for t in parts[0][1]], ys[:n_train])
    test = TextDataset([str(t) for _, texts, _ in parts[1:] for t in texts], ys[n_train:]) if len(parts) > 1 else None
    stamp = digest(files=[(n, len(t), hash_texts(t)) for n, t, _ in parts])
    return _text_splits(train, test, classes, req, f"{kind}:{root.resolve()}:{text_column}:{label_column}:{stamp}")


def _check_cells(where: str, texts: list, labels: list, text_column: str, label_column: str) -> None:
    if not texts:
        raise LayaError(f"{where} has no rows")
    for k, (t, y) in enumerate(zip(texts, labels)):
        if t is None or not str(t).strip():
            raise LayaError(f"{where} row {k} has an empty '{text_column}': every sample needs a text")
        if y is None or str(y) == "":
            raise LayaError(f"{where} row {k} has an empty '{label_column}': every sample needs a class")


def hash_texts(texts: list) -> str:
    return digest(texts=[str(t) for t in texts])


def _text_splits(train: TextDataset, test: TextDataset | None, classes, req: DataSettings, identity: str) -> DataSplits:
    if len(classes) < 2:
        raise LayaError(f"{req.name} has {len(classes)} class(es); a classifier needs at least 2")
    if test is None:
        kept, held = stratified_split(train.labels, 0.2, TEST_SPLIT_SEED)
        train, test = train.subset(kept), train.subset(held)
    return _finish(train, test, classes, req, identity)


# --------------------------------------------------------------------------- tokenisation


def is_text(data: DataSplits) -> bool:
    return getattr(data.train, "modality", "image") == "text"


def tokenize_splits(data: DataSplits, backbone) -> DataSplits:
    """The splits as token batches for a text backbone (training its tokenizer on the training split when it
    has none); images for an image backbone. A text model given images, or an image model given text:
    one line."""
    from ..backbones.spec import TextInput

    text_model = isinstance(backbone.input_cfg, TextInput)
    if not is_text(data):
        if text_model:
            raise LayaError(f"{backbone.spec.name} is a text model but dataset {data.name} holds images")
        return data
    if not text_model:
        raise LayaError(f"dataset {data.name} holds text but {backbone.spec.name} is an image model (try hf:NAME)")
    if isinstance(data.train, TokenDataset):
        return data
    from ..backbones import tokenizers

    cfg = backbone.input_cfg
    if not cfg.tokenizer:
        tokenizers.train_tokenizer(cfg, data.train.texts, f"the {data.name} training split")
    splits = {
        name: TokenDataset(tokenizers.encode(cfg, split.texts), split.labels, split.texts)
        for name, split in (("train", data.train), ("val", data.val), ("test", data.test))
    }
    identity = f"{data.identity}:tokens:{digest(tokenizer=cfg.tokenizer, max_length=cfg.max_length)}"
    return DataSplits(splits["train"], splits["val"], splits["test"], data.classes, data.name, identity)
