"""The data a job reads, as settings: the training data set and how its files are read (``DataSettings``, recorded
in the checkpoint) and the samples a command reads from a checkpoint's data (``EvalDataSettings``). Declared once
(``runtime.declare.setting``); no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..runtime.declare import COUNT_MAX, SEED_MAX, WIDTH_MAX, Settings, check_fields, normalise, setting
from ..runtime.errors import LayaError

LABELS = ("genre", "artist")

DATASET_HELP = (
    "digits, fashion-mnist, cifar10, artworks, wordnet-supersenses (text), folder:PATH (an image folder), "
    "wds:PATH/{000..099}.tar, parquet:PATH, hf-disk:PATH, csv:PATH or jsonl:PATH (text), text:PATH (a corpus for "
    "--task lm) (docs/datasets.md)."
)
ENCODING_HELP = (
    "csv:/jsonl: the files' text encoding, e.g. latin-1, cp1252, utf-16 (default: UTF-8, with or without "
    "a byte-order mark); recorded in the checkpoint, so audit and export read the data the same way."
)
DATA_DIR_HELP = "Where the dataset lives (see docs/datasets.md)."


@dataclass(frozen=True)
class DataSettings(Settings):
    PANEL: ClassVar[str] = "Data"

    name: str = setting("digits", DATASET_HELP, param="dataset", panel="Main")
    data_dir: str | None = setting(None, DATA_DIR_HELP, task="classify")
    image_size: int | None = setting(
        None,
        "Side of file-based images (default: the backbone's input).",
        minimum=1,
        task="classify",
        maximum=WIDTH_MAX,
    )  # after loading
    label: str = setting("genre", "artworks only: genre or artist.", choices=LABELS, task="classify")
    seed: int = setting(1337, "The split's seed: the run's --seed.", cli=False, maximum=SEED_MAX)
    strict: bool = setting(
        False,
        "Fail on an undecodable image (or a tar sample without image or class) instead of skipping it.",
        task="classify",
    )
    image_column: str = setting("image", "parquet:/hf-disk: the column holding the encoded images.", task="classify")
    label_column: str = setting(
        "label", "parquet:/hf-disk:/csv:/jsonl: the column holding the class (index or name).", task="classify"
    )
    text_column: str | None = setting(
        None,
        "Text data: the column holding the texts (csv:/jsonl: default 'text'; parquet:/hf-disk: set it for text).",
    )
    encoding: str | None = setting(None, ENCODING_HELP)  # None: UTF-8, with or without a BOM

    # Added after run records existed: left out of TrainJobSettings.options() while at these defaults, so
    # the fingerprints of earlier runs (--resume states, laya bench records) stay valid.
    LATER = {"image_column": "image", "label_column": "label", "text_column": None, "encoding": None}

    def validate(self) -> DataSettings:
        """UTF-8 (with or without a BOM) is what laya reads by default: never recorded, as None."""
        check_fields(self)
        encoding = check_encoding(self.encoding)
        normalise(self, encoding=None if encoding == "utf-8" else encoding)
        return self


@dataclass(frozen=True)
class EvalDataSettings(Settings):
    """The samples a command reads from a checkpoint's data (``laya audit``, ``depth``, ``export``, ``diff``)."""

    PANEL: ClassVar[str] = "Data"

    samples: int | None = setting(
        None, "Use a seeded random subset of N test samples (default: all).", minimum=1, panel="Main", maximum=COUNT_MAX
    )
    dataset: str | None = setting(None, "Use another dataset (default: the checkpoint's own test split).", panel="Main")
    data_dir: str | None = setting(None, DATA_DIR_HELP, task="classify")
    encoding: str | None = setting(None, ENCODING_HELP)

    def validate(self) -> EvalDataSettings:
        check_fields(self)
        check_encoding(self.encoding)
        return self


def check_encoding(name: str | None) -> str | None:
    """``--encoding``: Python's name of the text codec (``latin-1`` -> ``iso8859-1``; ``utf-8`` for UTF-8 with or
    without a byte-order mark), None when not given; an unknown name, or a codec that is no text encoding
    (``base64``), is a LayaError."""
    import codecs

    if name is None:
        return None
    try:
        codec = codecs.lookup(name.strip())
    except LookupError:
        codec = None
    if codec is None or not getattr(codec, "_is_text_encoding", True):
        raise LayaError(f"--encoding {name}: not a text encoding Python knows (e.g. utf-8, latin-1, cp1252, utf-16)")
    return "utf-8" if codec.name in ("utf-8", "utf-8-sig") else codec.name
