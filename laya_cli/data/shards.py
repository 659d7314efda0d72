"""The ecosystem's large-data image formats as image sources (``images.py``): WebDataset tar
shards, Parquet files and Hugging Face ``datasets`` saved with ``save_to_disk``.

    --dataset wds:PATH/{000..099}.tar       WebDataset shards: samples are consecutive members sharing a
                                            key (webdataset's rule: the name up to the first dot); the image
                                            is the .jpg/.png/… member, the class the .cls (index) or .txt (name)
    --dataset parquet:PATH                  a .parquet file, or a folder of them (HF's train-*/test-* names
                                            give the official split); --image-column, --label-column
    --dataset hf-disk:PATH                  datasets.load_from_disk(PATH) (a Dataset or a DatasetDict with
                                            train/test); needs `pip install 'laya-audit[hf]'`

Each is indexed once (tar headers, Parquet row groups, the Arrow table's rows) so that any row
can be read on its own: the data set then gets the same split, the same skipped-image rule and
the same decoding, in memory or streamed, as an image folder. A tar shard must be uncompressed
(``.tar``): random access into a ``.tar.gz`` would mean decompressing it from the start.

What is left out and counted (``--strict`` fails instead): a tar sample with no image member or
no class, and an image that does not decode. Image bytes are read lazily, a few rows at a time,
by the decode workers (Parquet: one row group's image column at a time per worker).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..runtime.errors import LayaError
from ..runtime.fileio import digest

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff", "gif")
CLASS_EXTENSIONS = ("cls", "cls.txt", "cls2", "txt", "label")  # index (cls*) before name (txt, label)


@dataclass
class Part:
    """One split's rows: the image source and each row's class name."""

    source: object
    names: list[str]


@dataclass
class Found:
    """What a format reader found: the rows (one set, or official train and test), the classes in
    label order, what the feature cache keys on, and how many samples were left out."""

    train: Part
    test: Part | None
    classes: list[str]
    identity: str
    skipped: int = 0
    notes: list[str] = field(default_factory=list)


def _labels_to_names(values: Sequence, declared: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(name per row, classes in label order): declared class names (ClassLabel) index by value;
    otherwise integers sort numerically and strings alphabetically, as folder names do."""
    if declared:
        names = []
        for v in values:
            if not 0 <= int(v) < len(declared):
                raise LayaError(f"label {v} is outside the {len(declared)} declared class names")
            names.append(declared[int(v)])
        return names, list(declared)
    if all(isinstance(v, (int, np.integer)) for v in values):
        names = [str(int(v)) for v in values]
        return names, [str(v) for v in sorted({int(v) for v in values})]
    names = [str(v) for v in values]
    return names, sorted(set(names))


# --------------------------------------------------------------------------- WebDataset tar shards


def base_plus_ext(path: str) -> tuple[str | None, str | None]:
    """webdataset's grouping rule (``webdataset.tariterators.base_plus_ext``): key = the member name up to
    the first dot of its last path part, extension = the rest."""
    match = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path)
    return (match.group(1), match.group(2)) if match else (None, None)


def expand_shards(pattern: str) -> list[Path]:
    """``PATH/{000..099}.tar`` (brace ranges and lists, as webdataset expands them) or a folder of .tar files."""
    from braceexpand import braceexpand

    p = Path(os.path.expanduser(pattern))
    if p.is_dir():
        return sorted(p.glob("*.tar"))
    return [Path(os.path.expanduser(s)) for s in braceexpand(pattern)]


class TarSource:
    """Images inside uncompressed tar shards, read at their byte offset."""

    def __init__(self, shards: list[str], shard: np.ndarray, offset: np.ndarray, size: np.ndarray, members: list[str]):
        self.shards, self.shard, self.offset, self.size, self.members = shards, shard, offset, size, members
        self._files: dict = {}
        self._pid = None

    def __len__(self) -> int:
        return len(self.offset)

    def __getstate__(self):  # open files stay behind when a worker process gets a copy
        return {**self.__dict__, "_files": {}, "_pid": None}

    def open(self, i: int):
        if self._pid != os.getpid():  # a forked worker: its own file handles
            self._files, self._pid = {}, os.getpid()
        k = int(self.shard[i])
        f = self._files.get(k)
        if f is None:
            f = self._files[k] = open(self.shards[k], "rb")
        f.seek(int(self.offset[i]))
        return io.BytesIO(f.read(int(self.size[i])))

    def describe(self, i: int) -> str:
        return f"{self.shards[int(self.shard[i])]}:{self.members[i]}"

    def stamp(self) -> str:
        return digest(shards=[_file_stamp(p) for p in self.shards], n=len(self))


def _file_stamp(path) -> str:
    st = os.stat(path)
    return f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"


def read_wds(pattern: str, strict: bool) -> Found:
    shards = expand_shards(pattern)
    missing = [p for p in shards if not p.is_file()]
    if not shards or missing:
        raise LayaError(
            f"WebDataset shards not found: {missing[0] if missing else pattern} "
            f"(expected --dataset wds:PATH/{{000..099}}.tar or a folder of .tar files)"
        )
    shard_i, offsets, sizes, members, labels = [], [], [], [], []
    skipped, kinds = [], set()
    for k, path in enumerate(shards):
        for key, sample in _tar_samples(path):
            image = next((sample[e] for e in IMAGE_EXTENSIONS if e in sample), None)
            label_ext = next((e for e in CLASS_EXTENSIONS if e in sample), None)
            if image is None or label_ext is None:
                what = "no image member" if image is None else "no .cls/.txt class member"
                skipped.append(f"{path}:{key} ({what}: {', '.join(sorted(sample)) or 'empty'})")
                continue
            shard_i.append(k)
            offsets.append(image.offset_data)
            sizes.append(image.size)
            members.append(image.name)
            labels.append(sample[label_ext])
            kinds.add("index" if label_ext.startswith("cls") else "name")
    if skipped and strict:
        raise LayaError(f"sample {skipped[0]} is not an image sample (--strict)")
    if not offsets:
        raise LayaError(f"no image sample with a class found in {len(shards)} shard(s) of {pattern}")
    names, classes = _labels_to_names(_class_values(labels, kinds, pattern), None)
    source = TarSource(
        [str(p) for p in shards],
        np.asarray(shard_i, dtype=np.int32),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(sizes, dtype=np.int64),
        members,
    )
    identity = f"wds:{[str(p.resolve()) for p in shards]}:{source.stamp()}"
    return Found(Part(source, names), None, classes, identity, len(skipped))


def _tar_samples(path: Path) -> Iterator[tuple[str, dict]]:
    """The samples of one WebDataset shard in order: (key, {extension: its TarInfo, or a class member's
    text}), the members that share a key being one sample. The image bytes are not read here."""
    import tarfile

    try:
        tar = tarfile.open(path, "r:")
    except (tarfile.TarError, OSError) as e:
        raise LayaError(
            f"{path} is not an uncompressed tar shard ({str(e).splitlines()[0][:80]}); "
            f"WebDataset shards for laya are .tar files"
        ) from None
    key, sample = None, {}
    with tar:
        try:
            for info in tar:
                if not info.isfile():
                    continue
                base = info.name.rsplit("/", 1)[-1]
                if base.startswith("__") and base.endswith("__"):
                    continue  # webdataset's metadata members
                prefix, ext = base_plus_ext(info.name)
                if prefix is None:
                    continue
                if prefix != key:
                    if key is not None:
                        yield key, sample
                    key, sample = prefix, {}
                ext = ext.lower()
                if ext in CLASS_EXTENSIONS:
                    sample[ext] = tar.extractfile(info).read().decode("utf-8", "replace").strip()
                else:
                    sample[ext] = info
        except tarfile.TarError as e:
            raise LayaError(f"{path} is a damaged tar shard ({str(e).splitlines()[0][:80]})") from None
        if key is not None:
            yield key, sample


def _class_values(labels: list[str], kinds: set[str], pattern: str) -> list:
    """Class indices when every sample's class is a .cls member, else the class names as written."""
    if kinds != {"index"}:
        return labels
    try:
        return [int(v) for v in labels]
    except ValueError:
        raise LayaError(f"a .cls member of {pattern} is not a class index: use .txt for class names") from None


# --------------------------------------------------------------------------- Parquet


def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LayaError("--dataset parquet: needs pyarrow: pip install 'laya-audit[parquet]'") from None
    return pq


def _image_value(value, base: Path | None):
    """An image cell -> what PIL opens: raw bytes, HF's {'bytes', 'path'} struct, or a path."""
    if isinstance(value, dict):
        if value.get("bytes") is not None:
            return io.BytesIO(value["bytes"])
        value = value.get("path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(value))
    if isinstance(value, str):
        p = Path(value)
        return str(p if p.is_absolute() or base is None else base / p)
    raise ValueError(f"not an image cell: {type(value).__name__}")


class ParquetSource:
    """Images in a Parquet column, read one row group at a time (per process)."""

    def __init__(self, files: list[str], column: str, file: np.ndarray, group: np.ndarray, row: np.ndarray):
        self.files, self.column, self.file, self.group, self.row = files, column, file, group, row
        self._cached: tuple | None = None

    def __len__(self) -> int:
        return len(self.row)

    def __getstate__(self):
        return {**self.__dict__, "_cached": None}

    def open(self, i: int):
        where = (int(self.file[i]), int(self.group[i]))
        if self._cached is None or self._cached[0] != where:
            pq = _pyarrow()
            table = pq.ParquetFile(self.files[where[0]]).read_row_group(where[1], columns=[self.column])
            self._cached = (where, table.column(0))
        return _image_value(self._cached[1][int(self.row[i])].as_py(), Path(self.files[where[0]]).parent)

    def describe(self, i: int) -> str:
        return f"{self.files[int(self.file[i])]} row group {int(self.group[i])} row {int(self.row[i])}"

    def stamp(self) -> str:
        return digest(files=[_file_stamp(p) for p in self.files], column=self.column, n=len(self))


def _hf_class_names(schema, column: str) -> list[str] | None:
    """Class names declared by Hugging Face's ClassLabel feature (kept in the Parquet schema metadata)."""
    import json

    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return None
    try:
        feature = json.loads(meta)["info"]["features"][column]
        return list(feature["names"]) if feature.get("_type") == "ClassLabel" else None
    except (KeyError, TypeError, ValueError):
        return None


def _parquet_part(files: list[Path], image_column: str, label_column: str) -> tuple[ParquetSource, list, list | None]:
    pq = _pyarrow()
    file_i, groups, rows, labels, declared = [], [], [], [], None
    for k, path in enumerate(files):
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises its own error types for a file that is not Parquet
            raise LayaError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:80]})") from None
        names = pf.schema_arrow.names
        for option, column in (("--image-column", image_column), ("--label-column", label_column)):
            if column not in names:
                raise LayaError(
                    f"{path} has no column '{column}' (columns: {', '.join(names)}); choose it with {option}"
                    + (" (text data: pass --text-column)" if option == "--image-column" else "")
                )
        declared = declared or _hf_class_names(pf.schema_arrow, label_column)
        labels += pf.read(columns=[label_column]).column(0).to_pylist()
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            file_i.append(np.full(n, k, dtype=np.int32))
            groups.append(np.full(n, g, dtype=np.int32))
            rows.append(np.arange(n, dtype=np.int32))
    if any(v is None for v in labels):
        raise LayaError(f"column '{label_column}' has empty cells: every image needs a class")
    cat = lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    source = ParquetSource(
        [str(p) for p in files], image_column, cat(file_i, np.int32), cat(groups, np.int32), cat(rows, np.int32)
    )
    return source, labels, declared


def read_parquet(path: str, image_column: str, label_column: str) -> Found:
    root = Path(os.path.expanduser(path))
    if root.is_dir():
        files = sorted(root.rglob("*.parquet"))
    elif root.is_file():
        files = [root]
    else:
        raise LayaError(f"Parquet data not found: {root} (a .parquet file or a folder of them)")
    if not files:
        raise LayaError(f"no .parquet file in {root}")
    split_of = lambda p: p.name.split("-")[0].split(".")[0].lower()
    train = [p for p in files if split_of(p) == "train"]
    test = [p for p in files if split_of(p) in ("test", "validation", "val")] if train else []
    parts = [(train, "train"), (test, "test")] if train and test else [(files, "all")]
    found = []
    for group, _ in parts:
        source, labels, declared = _parquet_part(group, image_column, label_column)
        found.append((source, labels, declared))
    declared = found[0][2]
    names_all, classes = _labels_to_names([v for _, labels, _ in found for v in labels], declared)
    n_train = len(found[0][1])
    train_part = Part(found[0][0], names_all[:n_train])
    test_part = Part(found[1][0], names_all[n_train:]) if len(found) > 1 else None
    stamp = digest(parts=[s.stamp() for s, _, _ in found])
    identity = f"parquet:{root.resolve()}:{image_column}:{label_column}:{stamp}"
    return Found(train_part, test_part, classes, identity)


# --------------------------------------------------------------------------- Hugging Face datasets on disk


class HFSource:
    """Images in a column of a Hugging Face ``datasets.Dataset`` (memory-mapped Arrow), read by row."""

    def __init__(self, dataset, column: str, where: str):
        self.dataset, self.column, self.where = dataset, column, where

    def __len__(self) -> int:
        return len(self.dataset)

    def open(self, i: int):
        return _image_value(self.dataset[int(i)][self.column], None)

    def describe(self, i: int) -> str:
        return f"{self.where} row {int(i)}"

    def stamp(self) -> str:
        return digest(fingerprint=getattr(self.dataset, "_fingerprint", None), n=len(self), column=self.column)


def read_hf_splits(root: Path, label_column: str) -> tuple[list, list[str] | None]:
    """[(split name, Dataset)] of a ``save_to_disk`` folder (train, then test or validation, when it has
    splits) and the label column's declared class names (a ClassLabel), if any."""
    try:
        import datasets
    except ImportError:
        raise LayaError(
            "--dataset hf-disk: needs the Hugging Face datasets package: pip install 'laya-audit[hf]'"
        ) from None
    if not root.is_dir():
        raise LayaError(f"Hugging Face dataset not found: {root} (a folder written by save_to_disk)")
    try:
        loaded = datasets.load_from_disk(str(root))
    except Exception as e:  # datasets raises FileNotFoundError or its own errors for a folder it cannot read
        raise LayaError(f"{root} is not a dataset saved with save_to_disk ({str(e).splitlines()[0][:100]})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise LayaError(f"{root} has splits {', '.join(loaded)} but no 'train' split")
        test_name = next((s for s in ("test", "validation") if s in loaded), None)
        splits = [("train", loaded["train"])] + ([(test_name, loaded[test_name])] if test_name else [])
    else:
        splits = [("all", loaded)]
    feature = splits[0][1].features.get(label_column)
    declared = list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
    return splits, declared


def read_hf_disk(path: str, image_column: str, label_column: str) -> Found:
    root = Path(os.path.expanduser(path))
    splits, declared = read_hf_splits(root, label_column)  # names the extra when datasets is not installed
    import datasets

    prepared = []
    for name, ds in splits:
        columns = list(ds.column_names)
        for option, column in (("--image-column", image_column), ("--label-column", label_column)):
            if column not in columns:
                raise LayaError(
                    f"{root} ({name}) has no column '{column}' (columns: {', '.join(columns)}); choose it with {option}"
                    + (" (text data: pass --text-column)" if option == "--image-column" else "")
                )
        labels = list(ds.select_columns([label_column])[label_column])
        if isinstance(ds.features[image_column], datasets.Image):
            ds = ds.cast_column(image_column, datasets.Image(decode=False))
        prepared.append((HFSource(ds.select_columns([image_column]), image_column, f"{root} ({name})"), labels))
    names_all, classes = _labels_to_names([v for _, labels in prepared for v in labels], declared)
    n_train = len(prepared[0][1])
    train = Part(prepared[0][0], names_all[:n_train])
    test = Part(prepared[1][0], names_all[n_train:]) if len(prepared) > 1 else None
    identity = (
        f"hf-disk:{root.resolve()}:{image_column}:{label_column}:{digest(parts=[s.stamp() for s, _ in prepared])}"
    )
    return Found(train, test, classes, identity)


FORMATS = {"wds": read_wds, "parquet": read_parquet, "hf-disk": read_hf_disk}
