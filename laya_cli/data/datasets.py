"""Datasets as [0, 1] image tensors (C×H×W) with integer labels, split train/val/test.

Split rule (also in docs/datasets.md): the official test split where one exists, else a
stratified 20% test split with a fixed seed (0) so it never moves; validation is a
stratified 10% of the remaining training data, seeded with the run's ``--seed``.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..runtime.environment import data_dir, offline
from ..runtime.errors import LayaError, match_choice
from .corpus import Corpus, open_corpus
from .images import IMAGE_SUFFIXES, FileSource, LazyImages, decode_workers, load_images, take  # noqa: F401
from .settings import LABELS, DataSettings
from .splits import (  # noqa: F401  (datasets.DataSplits etc.: where they lived before splits.py)
    TEST_SPLIT_SEED,
    DataDirMissing,
    DataSplits,
    ImageTensorDataset,
    _finish,
    _split_test,
    stratified_split,
)
from .text import load_text_columns, load_wordnet_supersenses
from .textfiles import TEXT_FILE_KINDS, holds_text

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


# --------------------------------------------------------------------------- digits


def load_digits(req: DataSettings) -> DataSplits:
    if req.data_dir:
        raise DataDirMissing(
            f"--data-dir {req.data_dir} does not apply to digits (bundled with scikit-learn); leave it out"
        )
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    images = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    train, test = _split_test(ImageTensorDataset(images, torch.tensor(d.target)))
    return _finish(train, test, [str(c) for c in d.target_names], req, "digits:sklearn")


# --------------------------------------------------------------------------- fashion-mnist

FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally .gz): big-endian dims after a 4-byte magic number."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise LayaError(f"{path} is truncated: expected {int(np.prod(dims))} values, found {arr.size}")
    return arr.reshape(dims)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for candidate in (
        folder / stem,
        folder / f"{stem}.gz",
        folder / "FashionMNIST" / "raw" / stem,
        folder / "FashionMNIST" / "raw" / f"{stem}.gz",
    ):
        if candidate.is_file():
            return candidate
    return None


def _fashion_dirs(req: DataSettings) -> list[Path]:
    return [DEBIAN_FASHION_MNIST, default_data_dir()]


def explicit_dir(req: DataSettings, holds: Callable[[Path], bool], wanted: str) -> Path | None:
    """The ``--data-dir`` the user gave, which must hold the dataset (``wanted``: what was looked for, with
    ``{dir}`` for the folder): an explicit folder is never silently swapped for another copy (a typo must
    not train on the system's copy). None when no --data-dir was given."""
    if not req.data_dir:
        return None
    folder = Path(req.data_dir).expanduser()
    looked = wanted.format(dir=folder)
    if not folder.is_dir():
        raise DataDirMissing(f"--data-dir {req.data_dir}: no such folder (it should hold {req.name}: {looked})")
    if not holds(folder):
        raise DataDirMissing(f"--data-dir {req.data_dir} does not hold {req.name}: looked for {looked}")
    return folder


def default_data_dir() -> Path:
    return data_dir()


def load_fashion_mnist(req: DataSettings) -> DataSplits:
    looked = _fashion_dirs(req)
    stem = FASHION_FILES["test"][0]
    folder = explicit_dir(
        req, lambda d: _find_idx(d, stem) is not None, f"{{dir}}/{stem}[.gz] or {{dir}}/FashionMNIST/raw/{stem}[.gz]"
    )
    if folder is None:
        folder = next((d for d in looked if _find_idx(d, stem)), None)
    if folder is None:
        folder = _download_torchvision("FashionMNIST", looked)
    arrays = {}
    for split, (img_stem, lbl_stem) in FASHION_FILES.items():
        img, lbl = _find_idx(folder, img_stem), _find_idx(folder, lbl_stem)
        if img is None or lbl is None:
            raise LayaError(f"fashion-mnist in {folder} lacks the {split} split ({img_stem}, {lbl_stem})")
        arrays[split] = ImageTensorDataset(
            torch.from_numpy(read_idx(img).copy()).unsqueeze(1), torch.from_numpy(read_idx(lbl).astype(np.int64))
        )
    return _finish(arrays["train"], arrays["test"], FASHION_CLASSES, req, f"fashion-mnist:{folder.resolve()}")


def _download_torchvision(dataset: str, looked: list[Path]) -> Path:
    """Users are online: fetch with torchvision into the default data dir, else explain."""
    import torchvision

    root = default_data_dir()
    try:
        if offline():
            raise RuntimeError("LAYA_OFFLINE is set")
        getattr(torchvision.datasets, dataset)(str(root), train=True, download=True)
        getattr(torchvision.datasets, dataset)(str(root), train=False, download=True)
    except Exception as e:
        where = ", ".join(str(p) for p in looked)
        hint = {
            "FashionMNIST": "apt-get install dataset-fashion-mnist, or put the IDX .gz files in --data-dir",
            "CIFAR10": "put cifar-10-batches-py/ under --data-dir",
        }[dataset]
        raise LayaError(
            f"{dataset} not found (looked in {where}) and download failed ({str(e)[:80]}); {hint}"
        ) from None
    return root


# --------------------------------------------------------------------------- cifar10


def load_cifar10(req: DataSettings) -> DataSplits:
    import torchvision

    looked = [default_data_dir()]
    root = explicit_dir(req, lambda d: (d / "cifar-10-batches-py").is_dir(), "{dir}/cifar-10-batches-py/")
    if root is None:
        root = next((d for d in looked if (d / "cifar-10-batches-py").is_dir()), None)
    if root is None:
        root = _download_torchvision("CIFAR10", looked)
    splits = {}
    for split in ("train", "test"):
        ds = torchvision.datasets.CIFAR10(str(root), train=split == "train", download=False)
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
        splits[split] = ImageTensorDataset(images, torch.tensor(ds.targets))
    return _finish(splits["train"], splits["test"], ds.classes, req, f"cifar10:{root.resolve()}")


# --------------------------------------------------------------------------- image files


def _hidden(name: str) -> bool:
    """A name a file manager hides ('.ipynb_checkpoints', '.DS_Store', macOS's '._x.png'): never data."""
    return name.startswith(".")


def _image_files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in IMAGE_SUFFIXES
        and not any(_hidden(part) for part in p.relative_to(folder).parts)
        and p.is_file()
    )


def labelled_files(root: Path) -> tuple[list[Path], list[str]]:
    """ImageFolder layout: root/<class>/**/image; returns files and their class names. A hidden folder is no class;
    a class folder without an image is left out with a note naming it."""
    from ..runtime.progress import log

    files, labels = [], []
    for class_dir in sorted(d for d in root.iterdir() if d.is_dir() and not _hidden(d.name)):
        found = _image_files(class_dir)
        if not found:
            log(f"note: {class_dir} holds no image file: not a class", "yellow")
        for f in found:
            files.append(f)
            labels.append(class_dir.name)
    return files, labels


def _files_dataset(files, names, classes, size, strict) -> tuple[ImageTensorDataset, int]:
    return _source_dataset(FileSource(files), names, classes, size, strict)


def _source_dataset(source, names, classes, size, strict) -> tuple[ImageTensorDataset, int]:
    """The decodable images of an image source (in memory or streamed, images.py) with their labels."""
    images, kept = load_images(source, size, strict)
    index = {c: i for i, c in enumerate(classes)}
    labels = torch.tensor([index[names[i]] for i in kept])
    return ImageTensorDataset(images, labels), len(source) - len(kept)


def load_folder(req: DataSettings, root: Path | None = None) -> DataSplits:
    root = Path(root or req.name.partition(":")[2]).expanduser()
    if req.data_dir:
        raise DataDirMissing(
            f"--data-dir {req.data_dir} does not apply to folder:PATH datasets (the path is the data); leave it out"
        )
    if not root.is_dir():
        raise LayaError(f"image folder not found: {root} (expected {root}/<class>/<image>)")
    size = req.image_size or 32
    test_dir = next((root / n for n in ("test", "val") if (root / n).is_dir() and (root / "train").is_dir()), None)
    if test_dir is not None:
        train_files, train_names = labelled_files(root / "train")
        test_files, test_names = labelled_files(test_dir)
        classes = sorted(set(train_names))
        train, s1 = _files_dataset(train_files, train_names, classes, size, req.strict)
        test, s2 = _files_dataset(test_files, test_names, classes, size, req.strict)
        skipped = s1 + s2
    else:
        files, names = labelled_files(root)
        classes = sorted(set(names))
        full, skipped = _files_dataset(files, names, classes, size, req.strict)
        train, test = _split_test(full)
    if len(classes) < 2:
        raise LayaError(f"{root} has {len(classes)} class folder(s); a classifier needs at least 2")
    identity = f"folder:{root.resolve()}:{_tree_stamp(root)}:{size}"
    return _finish(train, test, classes, req, identity, skipped)


def _tree_stamp(root: Path) -> str:
    """Changes when any file in the tree is added, removed, resized or touched."""
    import hashlib

    h = hashlib.sha256()
    for p in _image_files(root):
        st = p.stat()
        h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- artworks


def repair_mojibake(name: str) -> str:
    """Undo UTF-8 read as cp437/cp850 (what unzipping Kaggle's archive does to 'Dürer' written in
    NFD: ``Albrecht_Du╠êrer``, twice over ``Albrecht_DuΓòá├¬rer``), then normalise to NFC."""
    import unicodedata

    for _ in range(3):
        for codec in ("cp437", "cp850"):
            try:
                fixed = name.encode(codec).decode("utf-8")
            except (UnicodeEncodeError, UnicodeDecodeError):
                continue
            if fixed != name:
                name = fixed
                break
        else:
            break
    return unicodedata.normalize("NFC", name)


def _artist_key(name: str) -> str:
    return repair_mojibake(name).replace(" ", "_").casefold()


def _folded(key: str) -> str:
    """Accents folded away: a folder spelled 'Albrecht_Durer' still finds 'Albrecht Dürer'."""
    import unicodedata

    return unicodedata.normalize("NFKD", key).encode("ascii", "ignore").decode()


def _artwork_groups(root: Path) -> tuple[Path, dict[str, list[Path]]]:
    """Image files per artist, as Kaggle ships them: ``images/images/<Artist>/…`` (or
    ``images/<Artist>/…``), else the flat ``resized/resized/<Artist>_<N>.jpg`` (or ``resized/``)."""
    for images in (root / "images" / "images", root / "images"):
        folders = sorted(d for d in images.iterdir() if d.is_dir()) if images.is_dir() else []
        if folders:
            return images, {d.name: _image_files(d) for d in folders}
    for resized in (root / "resized" / "resized", root / "resized"):
        files = _image_files(resized) if resized.is_dir() else []
        if files:
            groups: dict[str, list[Path]] = {}
            for f in files:
                artist, _, number = f.stem.rpartition("_")
                groups.setdefault(artist if artist and number.isdigit() else f.stem, []).append(f)
            return resized, groups
    raise LayaError(
        f"artworks: no images under {root} (expected images/images/<Artist>/… or resized/resized/<Artist>_N.jpg)"
    )


def _warn(message: str) -> None:
    """Always shown (even with --quiet): a dataset silently losing classes is never acceptable."""
    from ..runtime.progress import warn

    warn(message)


def load_artworks(req: DataSettings) -> DataSplits:
    """Best Artworks of All Time: images/<Artist_Name>/*.jpg and artists.csv."""
    looked = [default_data_dir() / "artworks"]
    root = explicit_dir(req, lambda d: (d / "artists.csv").is_file(), "{dir}/artists.csv and {dir}/images/")
    if root is None:
        root = next((d for d in looked if (d / "artists.csv").is_file()), None)
    if root is None:
        raise LayaError(
            f"artworks not found (looked for artists.csv in {', '.join(map(str, looked))}); download "
            "'Best Artworks of All Time' from Kaggle and pass --data-dir to the folder with artists.csv and images/"
        )
    label_rule = match_choice("--label", req.label, LABELS)
    with open(root / "artists.csv", newline="", encoding="utf-8-sig") as f:
        rows = {
            repair_mojibake(row["name"]).replace(" ", "_"): row["genre"].split(",")[0].strip()
            for row in csv.DictReader(f)
        }
    exact = {k.casefold(): (k, g) for k, g in rows.items()}
    folded = {_folded(k.casefold()): (k, g) for k, g in rows.items()}
    images_dir, groups = _artwork_groups(root)
    by_artist: dict[str, list[tuple[str, tuple | None]]] = {}
    for raw in groups:
        key = _artist_key(raw)
        row = exact.get(key) or folded.get(_folded(key))
        by_artist.setdefault(row[0] if row else repair_mojibake(raw).replace(" ", "_"), []).append((raw, row))
    files, names, unmatched = [], [], []
    for artist, folders in by_artist.items():
        raw, row = max(folders, key=lambda f: len(groups[f[0]]))  # the fullest copy
        for other, _ in folders:  # Kaggle's archive holds Dürer twice (two mojibake spellings)
            if other != raw:
                _warn(f"artworks: skipping folder {other!r}: a second copy of {artist} (kept {raw!r})")
        group = groups[raw]
        if row is None:
            unmatched.append(raw)
            if label_rule == "genre":
                continue
        label = row[1] if label_rule == "genre" else artist
        files += group
        names += [label] * len(group)
    if unmatched:
        what = "left out (no genre)" if label_rule == "genre" else "kept, labelled by folder name"
        _warn(
            f"artworks: {len(unmatched)} artist folder(s) match no row of artists.csv and are {what}: "
            + ", ".join(repr(u) for u in unmatched)
        )
    if not files:
        raise LayaError(f"artworks: no artist under {images_dir} matches artists.csv")
    classes = sorted(set(names))
    full, skipped = _files_dataset(files, names, classes, req.image_size or 224, req.strict)
    train, test = _split_test(full)
    identity = f"artworks:{root.resolve()}:{_tree_stamp(images_dir)}:{label_rule}:{req.image_size}"
    return _finish(train, test, classes, req, identity, skipped, unmatched)


# --------------------------------------------------------------------------- shard formats (shards.py)


def load_sharded(req: DataSettings) -> DataSplits:
    """``wds:``, ``parquet:`` and ``hf-disk:`` data sets: read by shards.py, split like an image folder;
    with ``--text-column``, a text column instead (text.py)."""
    from . import shards

    kind, _, path = req.name.partition(":")
    if kind != "wds" and (req.text_column or holds_text(kind, Path(path).expanduser(), req.image_column)):
        return load_text(req)
    if kind == "wds":
        found = shards.read_wds(path, req.strict)
    else:
        found = shards.FORMATS[kind](path, req.image_column, req.label_column)
    size = req.image_size or 32
    train, skipped = _source_dataset(found.train.source, found.train.names, found.classes, size, req.strict)
    if found.test is not None:
        test, more = _source_dataset(found.test.source, found.test.names, found.classes, size, req.strict)
        skipped += more
    else:
        train, test = _split_test(train)
    if len(found.classes) < 2:
        raise LayaError(f"{req.name} has {len(found.classes)} class(es); a classifier needs at least 2")
    return _finish(train, test, found.classes, req, f"{found.identity}:{size}", skipped + found.skipped)


def load_text(req: DataSettings) -> DataSplits:
    return load_text_columns(req)


# --------------------------------------------------------------------------- registry

DATASETS: dict[str, Callable[[DataSettings], DataSplits]] = {
    "digits": load_digits,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "artworks": load_artworks,
    "wordnet-supersenses": load_wordnet_supersenses,
}


# Data sets named PREFIX:PATH.
PREFIXED: dict[str, Callable[[DataSettings], DataSplits]] = {
    "folder": load_folder,
    "wds": load_sharded,
    "parquet": load_sharded,
    "hf-disk": load_sharded,
    "csv": load_text,
    "jsonl": load_text,
}

# Language models' corpora named PREFIX:PATH (``--task lm``): documents streamed and packed in blocks (corpus.py).
CORPORA: dict[str, Callable[..., Corpus]] = {"text": open_corpus}


def corpus_path(name: str, reader: str) -> str:
    """The path of the corpus ``name`` (``text:PATH``), checked before any model is loaded; else the one-line error
    that ``reader`` (who reads it) reads a corpus, not ``name``."""
    prefix, _, path = name.partition(":")
    if prefix not in CORPORA or not path:
        raise LayaError(f"{reader}: --dataset text:PATH, not {name}")
    return path


def open_named_corpus(name: str, reader: str, text_column: str | None = None, encoding: str | None = None) -> Corpus:
    """The corpus ``name`` (``text:PATH``) opened by its prefix's reader; nothing is read yet."""
    path = corpus_path(name, reader)  # first: a name of no corpus is the one-line error
    return CORPORA[name.partition(":")[0]](path, text_column, encoding)


# The dataset name a checkpoint records when its head was trained from the user's own DataLoader
# (``laya_cli.fit``): no registry entry, so auditing it from the command line needs --dataset.
USER_DATASET = "user"


def holds_images(req: DataSettings) -> bool:
    """Datasets decoded from image files, at a size the backbone chooses: not text. ``parquet:``/``hf-disk:``
    data holds text with ``--text-column``, or when it has a ``text`` column and no image column (as a csv does)."""
    prefix, colon, path = req.name.partition(":")
    if not colon:
        return req.name == "artworks"
    if prefix not in PREFIXED or prefix in TEXT_FILE_KINDS:
        return False
    return prefix == "wds" or not (req.text_column or holds_text(prefix, Path(path).expanduser(), req.image_column))


def dataset_name(name: str) -> str:
    """The registered spelling of a dataset name, case-insensitive (``Fashion-MNIST`` -> ``fashion-mnist``);
    ``folder:PATH`` (and the other ``PREFIX:PATH`` sources) keep their path as given."""
    prefix, colon, path = name.partition(":")
    if colon and prefix.lower() in PREFIXED:
        return f"{prefix.lower()}:{path}"
    return match_choice("dataset", name, [*DATASETS, *(f"{p}:PATH" for p in PREFIXED)])


def load_dataset(req: DataSettings) -> DataSplits:
    name = dataset_name(req.name)
    prefix, colon, _ = name.partition(":")
    if req.validate().encoding and prefix not in TEXT_FILE_KINDS:
        arrow = " (its texts are Arrow strings, always UTF-8)" if prefix in ("parquet", "hf-disk") else ""
        raise LayaError(f"--encoding applies to csv: and jsonl: files, not {name}{arrow}; leave it out")
    if colon:
        return PREFIXED[prefix](req)
    return DATASETS[name](req)
