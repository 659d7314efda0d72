"""Text corpora for language modelling (``--dataset text:PATH``): documents streamed, tokenised, packed in blocks.

PATH is a ``.txt`` file (a document per non-empty line), a ``.jsonl`` file (its ``--text-column``, default
``text``), a ``.parquet`` file (the same column), a ``save_to_disk`` folder (``dataset_dict.json`` or
``dataset_info.json`` inside), or a folder of such files. A folder's ``train*`` and ``test*`` (``validation*``,
``val*``) files are the splits, read in name order; files without split names are all training data, and then
every tenth document is held out (the same ones on every run). Nothing is read whole: files are streamed a line or
a Parquet batch at a time (a ``.txt`` line longer than ``PIECE`` characters a piece at a time, cut at a space:
memory is bounded by the piece, the chunk and the block, not by the longest line), tokenised a chunk of documents at a
time, and packed into blocks of ``block`` tokens, documents joined by the model's end-of-text token (its tail
shorter than a block is dropped). A corpus larger than memory trains.
"""

from __future__ import annotations

import codecs
import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..runtime.errors import LayaError
from .textfiles import TEST_NAMES, check_not_wide

SUFFIXES = (".txt", ".jsonl", ".parquet")
HELD_OUT_EVERY = 10  # without a test file: documents 9, 19, 29… are held out
CHUNK = 512  # documents tokenised at once
CHUNK_CHARS = 1 << 20  # … or fewer, once they hold this many characters (a tokenised character costs ~100 bytes)
PIECE = 1 << 20  # characters of a .txt line read at once: a longer document is read (and tokenised) in pieces


class Continued(str):
    """A piece of a document that goes on in the next piece (a line longer than ``PIECE``): no end-of-text token
    after it, and it is held out with the rest of its document."""


@dataclass(frozen=True)
class Corpus:
    """Where the text is: the training and test sources (a test of None: every tenth training document)."""

    root: Path
    train: tuple[Path, ...]
    test: tuple[Path, ...] | None
    text_column: str = "text"
    encoding: str | None = None

    def documents(self, split: str) -> Iterator[str]:
        """The split's documents, streamed in file order."""
        if self.test is not None:
            yield from _read_all(self.train if split == "train" else self.test, self, split)
            return
        i = 0  # whole documents: the pieces of a long one go to the same split
        for doc in _read_all(self.train, self, "all"):
            if (i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1) == (split == "test"):
                yield doc
            i += not isinstance(doc, Continued)


def _is_hf_disk(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in ("dataset_dict.json", "dataset_info.json"))


def open_corpus(path: str, text_column: str | None = None, encoding: str | None = None) -> Corpus:
    """The corpus at ``path`` (``text:`` taken off), its files found and split; nothing is read yet."""
    root = Path(path).expanduser()
    column = text_column or "text"
    if _is_hf_disk(root):
        from .shards import read_hf_splits

        split_test = len(read_hf_splits(root, "")[0]) > 1  # a DatasetDict with a test or validation split
        return Corpus(root, (root,), (root,) if split_test else None, column, encoding)
    if root.is_file() and root.suffix in SUFFIXES:
        return Corpus(root, (root,), None, column, encoding)
    if root.is_file():
        raise LayaError(f"text:{path}: a language-model corpus is a {', '.join(SUFFIXES)} file or a folder of them")
    if not root.is_dir():
        raise LayaError(f"text:{path}: no such file or folder")
    found = sorted(p for p in root.rglob("*") if (p.is_file() and p.suffix in SUFFIXES) or _is_hf_disk(p))
    if not found:
        raise LayaError(f"text:{path} holds no {', '.join(SUFFIXES)} file and no save_to_disk folder")
    name = lambda p: p.name.split("-")[0].split(".")[0].split("_")[0].lower()  # noqa: E731
    train = tuple(p for p in found if name(p) == "train")
    test = tuple(p for p in found if name(p) in TEST_NAMES)
    if train:
        return Corpus(root, train, test or None, column, encoding)
    return Corpus(root, tuple(p for p in found if name(p) not in TEST_NAMES), None, column, encoding)


def _read_all(paths: Iterable[Path], corpus: Corpus, split: str) -> Iterator[str]:
    for path in paths:
        docs = _hf_disk(path, corpus, split) if _is_hf_disk(path) else READERS[path.suffix](path, corpus)
        yield from (doc for doc in docs if doc.strip())


def _lines(path: Path, encoding: str | None) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file, streamed. Without ``encoding``: UTF-8, with or without a BOM, decoded a
    line at a time so that bytes that do not decode are one line naming their line and byte (UTF-16/32 is named
    by its BOM); with one, Python's codec of that name."""
    with _read_errors(path, encoding):
        if encoding is None:
            yield from _utf8_lines(path)
            return
        with open(path, encoding=encoding, newline="") as f:
            yield from ((n, line.rstrip("\r\n")) for n, line in enumerate(f, 1))


@contextlib.contextmanager
def _read_errors(path: Path, encoding: str | None) -> Iterator[None]:
    """What reading a text file can fail with, as one line each: bytes the encoding does not decode, an unknown
    codec, an unreadable file."""
    try:
        yield
    except UnicodeDecodeError as e:
        raise LayaError(f"{path} is not {encoding} (byte 0x{e.object[e.start]:02x}); check --encoding") from None
    except LookupError:
        raise LayaError(f"--encoding {encoding}: no such codec") from None
    except OSError as e:
        raise LayaError(f"cannot read {path}: {e.strerror or e}") from None


def _utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, "rb") as f:
        check_not_wide(path, f.read(4096))
        f.seek(0)
        for number, raw in enumerate(f, 1):
            try:
                line = (raw.removeprefix(codecs.BOM_UTF8) if number == 1 else raw).decode("utf-8")
            except UnicodeDecodeError as e:
                raise LayaError(
                    f"{path}: line {number} is not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                    "name its encoding with --encoding"
                ) from None
            yield number, line.rstrip("\r\n")


def _txt(path: Path, corpus: Corpus) -> Iterator[str]:
    """A document per line; a line longer than ``PIECE`` in ``Continued`` pieces cut before a space (a word is cut
    only where none is found in a whole piece)."""
    carry = ""
    for _, piece, ends in _line_pieces(path, corpus.encoding):
        text = carry + piece
        if ends:
            carry = ""
            yield text
            continue
        cut = max(text.rfind(" "), text.rfind("\t"))  # before the space: a word keeps its leading space (GPT-2's BPE)
        cut = cut if cut > 0 else len(text)
        text, carry = text[:cut], text[cut:]
        if text:
            yield Continued(text)


def _line_pieces(path: Path, encoding: str | None) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, whether its line ends there) of a text file, read at most ``PIECE`` characters at a time
    (the file's last piece ends its line); the encodings and errors of ``_lines``."""
    previous = None
    with _read_errors(path, encoding):
        pieces = _utf8_pieces(path) if encoding is None else _coded_pieces(path, encoding)
        for item in pieces:
            if previous is not None:
                yield previous
            previous = item
    if previous is not None:
        yield previous[0], previous[1], True


def _coded_pieces(path: Path, encoding: str) -> Iterator[tuple[int, str, bool]]:
    with open(path, encoding=encoding, newline="") as f:
        number = 1
        while piece := f.readline(PIECE):
            ends = piece.endswith(("\n", "\r"))
            yield number, piece.rstrip("\r\n"), ends
            number += ends


def _utf8_pieces(path: Path) -> Iterator[tuple[int, str, bool]]:
    """UTF-8 (with or without a BOM), decoded a piece at a time: a character cut between two pieces is decoded whole;
    bytes that do not decode are one line naming their line and byte."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as f:
        check_not_wide(path, f.read(4096))
        f.seek(0)
        number, column = 1, 0
        while raw := f.readline(PIECE):
            raw = raw.removeprefix(codecs.BOM_UTF8) if number == 1 and column == 0 else raw
            ends = raw.endswith(b"\n")
            try:
                text = decoder.decode(raw, final=ends)
            except UnicodeDecodeError as e:
                raise LayaError(
                    f"{path}: line {number} is not UTF-8 (byte 0x{e.object[e.start]:02x} at column "
                    f"{column + e.start + 1}); name its encoding with --encoding"
                ) from None
            yield number, text.rstrip("\r\n"), ends
            number, column = (number + 1, 0) if ends else (number, column + len(raw))


def _jsonl(path: Path, corpus: Corpus) -> Iterator[str]:
    for number, line in _lines(path, corpus.encoding):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise LayaError(f"{path}: line {number} is not JSON ({e.msg})") from None
        text = row.get(corpus.text_column) if isinstance(row, dict) else None
        if not isinstance(text, str):
            raise LayaError(f"{path}: line {number} has no text in column '{corpus.text_column}'")
        yield text


def _parquet(path: Path, corpus: Corpus) -> Iterator[str]:
    from .shards import _pyarrow
    from .textfiles import check_string_column

    try:
        file = _pyarrow().ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow's many errors: one line
        raise LayaError(f"{path} is not a Parquet file: {type(e).__name__}") from None
    if corpus.text_column not in file.schema_arrow.names:
        raise LayaError(f"{path} has no column '{corpus.text_column}' (columns: {', '.join(file.schema_arrow.names)})")
    check_string_column(str(path), file.schema_arrow, corpus.text_column)
    for batch in file.iter_batches(columns=[corpus.text_column], batch_size=1024):
        yield from (t for t in batch.column(0).to_pylist() if t is not None)


def _hf_disk(path: Path, corpus: Corpus, split: str) -> Iterator[str]:
    """A ``save_to_disk`` folder's ``split``: its train or its test/validation split (``all``: every split)."""
    from .shards import read_hf_splits
    from .textfiles import check_string_column

    splits = read_hf_splits(path, "")[0]
    chosen = splits if split == "all" else [s for s in splits if (s[0] == "train") == (split == "train")]
    for name, ds in chosen:
        if corpus.text_column not in ds.column_names:
            raise LayaError(f"{path} ({name}) has no column '{corpus.text_column}'")
        check_string_column(f"{path} ({name})", ds.data.schema, corpus.text_column)
        for start in range(0, len(ds), 1024):
            yield from (t for t in ds[start : start + 1024][corpus.text_column] if t is not None)


READERS: dict[str, Callable[[Path, Corpus], Iterator[str]]] = {".txt": _txt, ".jsonl": _jsonl, ".parquet": _parquet}


# --------------------------------------------------------------------------- tokens and blocks


def token_blocks(documents: Iterable[str], tokenizer_json: str, block: int, eos_id: int | None) -> Iterator[Tensor]:
    """(block,) token ids, documents packed end to end (``eos_id`` after each, where the model has one)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    tok.no_truncation()
    tok.no_padding()
    buffer: list[int] = []
    chunk: list[str] = []
    size = 0
    for doc in documents:
        chunk.append(doc)
        size += len(doc)
        if len(chunk) == CHUNK or size >= CHUNK_CHARS:
            yield from _pack(tok.encode_batch(chunk), chunk, buffer, block, eos_id)
            chunk, size = [], 0
    if chunk:
        yield from _pack(tok.encode_batch(chunk), chunk, buffer, block, eos_id)


def _pack(encodings, docs: list[str], buffer: list[int], block: int, eos_id: int | None) -> Iterator[Tensor]:
    for e, doc in zip(encodings, docs):
        ends = eos_id is not None and not isinstance(doc, Continued)  # a document's end, not one of its pieces'
        buffer += e.ids + ([eos_id] if ends else [])
        while len(buffer) >= block:
            yield torch.tensor(buffer[:block], dtype=torch.int64)
            del buffer[:block]


def block_batches(blocks: Iterable[Tensor], batch_size: int, seed: int | None = None) -> Iterator[Tensor]:
    """B×2×T token batches (ids, an all-ones attention mask: packed blocks have no padding). ``seed``: blocks
    shuffled within a buffer of 64 batches (a stream cannot be shuffled whole); None keeps their order."""
    buffer: list[Tensor] = []
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    room = batch_size * (64 if g is not None else 1)
    for b in blocks:
        buffer.append(b)
        if len(buffer) >= room:
            yield from _emit(buffer, batch_size, g, keep=room - batch_size * (room // batch_size // 2 or 1))
    yield from _emit(buffer, batch_size, g, keep=0)


def _emit(buffer: list[Tensor], batch_size: int, g, keep: int) -> Iterator[Tensor]:
    if g is not None:
        order = torch.randperm(len(buffer), generator=g).tolist()
        buffer[:] = [buffer[i] for i in order]
    while len(buffer) > keep and buffer:
        rows, buffer[:] = buffer[:batch_size], buffer[batch_size:]
        ids = torch.stack(rows)
        yield torch.stack([ids, torch.ones_like(ids)], dim=1)
