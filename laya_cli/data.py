"""Datasets as [0, 1] image tensors (C×H×W) with integer labels, split train/val/test.

Split rule (also in docs/datasets.md): the official test split where one exists, else a
stratified 20% test split with a fixed seed (0) so it never moves; validation is a
stratified 10% of the remaining training data, seeded with the run's ``--seed``.
"""

from __future__ import annotations

import csv
import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from .config import LABELS, DataRequest, check_choice
from .errors import LayaError, unknown_choice

TEST_SPLIT_SEED = 0
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


class ImageTensorDataset(Dataset):
    """Images kept as uint8 (N, C, H, W) (or float in [0, 1]); served as float in [0, 1]."""

    def __init__(self, images: Tensor, labels: Tensor):
        self.images, self.labels = images, labels.long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i]
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        return x, self.labels[i]

    def subset(self, index: Tensor) -> "ImageTensorDataset":
        return ImageTensorDataset(self.images[index], self.labels[index])


@dataclass
class DataSplits:
    train: ImageTensorDataset
    val: ImageTensorDataset
    test: ImageTensorDataset
    classes: list[str]
    name: str
    identity: str  # what the feature cache keys on: name, files, label rule, image size
    skipped: int = 0  # undecodable images left out

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train.images.shape[1:])  # type: ignore[return-value]


def stratified_split(labels: Tensor, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """(kept, held_out) indices; held_out takes ``fraction`` of each class, at least one."""
    g = torch.Generator().manual_seed(seed)
    kept, held = [], []
    for c in labels.unique(sorted=True):
        idx = (labels == c).nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        n = max(1, round(fraction * len(idx))) if len(idx) > 1 else 0
        held.append(idx[:n])
        kept.append(idx[n:])
    return torch.cat(kept).sort().values, torch.cat(held).sort().values


def _finish(train: ImageTensorDataset, test: ImageTensorDataset, classes, req: DataRequest, identity: str, skipped=0):
    kept, val = stratified_split(train.labels, 0.1, req.seed)
    return DataSplits(train.subset(kept), train.subset(val), test, list(classes), req.name, identity, skipped)


def _split_test(full: ImageTensorDataset) -> tuple[ImageTensorDataset, ImageTensorDataset]:
    train, test = stratified_split(full.labels, 0.2, TEST_SPLIT_SEED)
    return full.subset(train), full.subset(test)


# --------------------------------------------------------------------------- digits


def load_digits(req: DataRequest) -> DataSplits:
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    images = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    train, test = _split_test(ImageTensorDataset(images, torch.tensor(d.target)))
    return _finish(train, test, [str(c) for c in d.target_names], req, "digits:sklearn")


# --------------------------------------------------------------------------- fashion-mnist

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
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
    for candidate in (folder / stem, folder / f"{stem}.gz", folder / "FashionMNIST" / "raw" / stem,
                      folder / "FashionMNIST" / "raw" / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _fashion_dirs(req: DataRequest) -> list[Path]:
    dirs = [Path(req.data_dir).expanduser()] if req.data_dir else []
    return dirs + [DEBIAN_FASHION_MNIST, default_data_dir()]


def default_data_dir() -> Path:
    return Path(os.environ.get("LAYA_DATA_DIR", Path.home() / ".cache" / "laya" / "data"))


def load_fashion_mnist(req: DataRequest) -> DataSplits:
    looked = _fashion_dirs(req)
    folder = next((d for d in looked if _find_idx(d, FASHION_FILES["test"][0])), None)
    if folder is None:
        folder = _download_torchvision("FashionMNIST", looked)
    arrays = {}
    for split, (img_stem, lbl_stem) in FASHION_FILES.items():
        img, lbl = _find_idx(folder, img_stem), _find_idx(folder, lbl_stem)
        if img is None or lbl is None:
            raise LayaError(f"fashion-mnist in {folder} lacks the {split} split ({img_stem}, {lbl_stem})")
        arrays[split] = ImageTensorDataset(torch.from_numpy(read_idx(img).copy()).unsqueeze(1),
                                           torch.from_numpy(read_idx(lbl).astype(np.int64)))
    return _finish(arrays["train"], arrays["test"], FASHION_CLASSES, req, f"fashion-mnist:{folder.resolve()}")


def _download_torchvision(dataset: str, looked: list[Path]) -> Path:
    """Users are online: fetch with torchvision into the default data dir, else explain."""
    import torchvision

    root = default_data_dir()
    try:
        if os.environ.get("LAYA_OFFLINE"):
            raise RuntimeError("LAYA_OFFLINE is set")
        getattr(torchvision.datasets, dataset)(str(root), train=True, download=True)
        getattr(torchvision.datasets, dataset)(str(root), train=False, download=True)
    except Exception as e:
        where = ", ".join(str(p) for p in looked)
        hint = {
            "FashionMNIST": "apt-get install dataset-fashion-mnist, or put the IDX .gz files in --data-dir",
            "CIFAR10": "put cifar-10-batches-py/ under --data-dir",
        }[dataset]
        raise LayaError(f"{dataset} not found (looked in {where}) and download failed ({str(e)[:80]}); {hint}") from None
    return root


# --------------------------------------------------------------------------- cifar10


def load_cifar10(req: DataRequest) -> DataSplits:
    import torchvision

    looked = [Path(req.data_dir).expanduser()] if req.data_dir else []
    looked.append(default_data_dir())
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


class _DecodeFiles(Dataset):
    """One image file -> (index, uint8 C×H×W or None, error name): what decode workers run."""

    def __init__(self, paths: list[Path], size: int):
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        try:
            with Image.open(self.paths[i]) as im:
                im = im.convert("RGB").resize((self.size, self.size), Image.BILINEAR)
                return i, torch.from_numpy(np.asarray(im, dtype=np.uint8).copy()).permute(2, 0, 1), ""
        except Exception as e:
            return i, None, type(e).__name__


def _as_is(item):
    return item


def decode_workers(n_files: int) -> int:
    """Worker processes that decode image files: ``LAYA_WORKERS``, else up to 8 for large folders
    (0 below 256 files, where starting workers costs more than it saves), shared by the ranks
    torchrun starts on this machine."""
    if os.environ.get("LAYA_WORKERS"):
        return max(0, int(os.environ["LAYA_WORKERS"]))
    if n_files < 256:
        return 0
    per_node = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(8, (os.cpu_count() or 1) // per_node - 1))


def _load_images(paths: list[Path], size: int, strict: bool) -> tuple[Tensor, list[int]]:
    """Decode, convert to RGB and resize to size×size; return uint8 images and kept indices.

    Large folders are decoded by DataLoader worker processes (``decode_workers``), in order.
    """
    from torch.utils.data import DataLoader

    decoded = _DecodeFiles(paths, size)
    workers = decode_workers(len(paths))
    items = DataLoader(decoded, batch_size=None, num_workers=workers, collate_fn=_as_is) if workers else (
        decoded[i] for i in range(len(decoded)))
    images, kept = [], []
    for i, image, error in items:
        if image is None:
            if strict:
                raise LayaError(f"cannot decode image {paths[i]}: {error}")
            continue
        images.append(image)
        kept.append(i)
    if not images:
        raise LayaError("no decodable image found")
    return torch.stack(images), kept


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def _labelled_files(root: Path) -> tuple[list[Path], list[str]]:
    """ImageFolder layout: root/<class>/**/image; returns files and their class names."""
    files, labels = [], []
    for class_dir in sorted(d for d in root.iterdir() if d.is_dir()):
        for f in _image_files(class_dir):
            files.append(f)
            labels.append(class_dir.name)
    return files, labels


def _files_dataset(files, names, classes, size, strict) -> tuple[ImageTensorDataset, int]:
    images, kept = _load_images(files, size, strict)
    index = {c: i for i, c in enumerate(classes)}
    labels = torch.tensor([index[names[i]] for i in kept])
    return ImageTensorDataset(images, labels), len(files) - len(kept)


def load_folder(req: DataRequest, root: Path | None = None) -> DataSplits:
    root = Path(root or req.name.partition(":")[2]).expanduser()
    if not root.is_dir():
        raise LayaError(f"image folder not found: {root} (expected {root}/<class>/<image>)")
    size = req.image_size or 32
    test_dir = next((root / n for n in ("test", "val") if (root / n).is_dir() and (root / "train").is_dir()), None)
    if test_dir is not None:
        train_files, train_names = _labelled_files(root / "train")
        test_files, test_names = _labelled_files(test_dir)
        classes = sorted(set(train_names))
        train, s1 = _files_dataset(train_files, train_names, classes, size, req.strict)
        test, s2 = _files_dataset(test_files, test_names, classes, size, req.strict)
        skipped = s1 + s2
    else:
        files, names = _labelled_files(root)
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


def load_artworks(req: DataRequest) -> DataSplits:
    """Best Artworks of All Time: images/<Artist_Name>/*.jpg and artists.csv."""
    looked = [Path(req.data_dir).expanduser()] if req.data_dir else []
    looked.append(default_data_dir() / "artworks")
    root = next((d for d in looked if (d / "artists.csv").is_file()), None)
    if root is None:
        raise LayaError(
            f"artworks not found (looked for artists.csv in {', '.join(map(str, looked))}); download "
            "'Best Artworks of All Time' from Kaggle and pass --data-dir to the folder with artists.csv and images/"
        )
    images_dir = root / "images" / "images" if (root / "images" / "images").is_dir() else root / "images"
    check_choice("--label", req.label, LABELS)
    with open(root / "artists.csv", newline="", encoding="utf-8") as f:
        genre = {row["name"].replace(" ", "_"): row["genre"].split(",")[0].strip() for row in csv.DictReader(f)}
    files, names = [], []
    for artist_dir in sorted(d for d in images_dir.iterdir() if d.is_dir()):
        key = artist_dir.name
        label = key if req.label == "artist" else genre.get(key) or _fuzzy_lookup(genre, key)
        if label is None:
            continue
        for f in _image_files(artist_dir):
            files.append(f)
            names.append(label)
    classes = sorted(set(names))
    full, skipped = _files_dataset(files, names, classes, req.image_size or 224, req.strict)
    train, test = _split_test(full)
    identity = f"artworks:{root.resolve()}:{_tree_stamp(images_dir)}:{req.label}:{req.image_size}"
    return _finish(train, test, classes, req, identity, skipped)


def _fuzzy_lookup(table: dict, key: str):
    """Kaggle's folder names sometimes differ from artists.csv in accents (Albrecht Durer)."""
    import unicodedata

    norm = lambda s: unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode().lower()
    matches = {norm(k): v for k, v in table.items()}
    return matches.get(norm(key))


# --------------------------------------------------------------------------- registry

DATASETS: dict[str, Callable[[DataRequest], DataSplits]] = {
    "digits": load_digits,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "artworks": load_artworks,
}


# The dataset name a checkpoint records when its head was trained from the user's own DataLoader
# (``laya_cli.fit``): no registry entry, so auditing it from the command line needs --dataset.
USER_DATASET = "user"


def is_file_dataset(name: str) -> bool:
    """Datasets decoded from image files, at a size the backbone chooses."""
    return name == "artworks" or name.startswith("folder:")


def load_dataset(req: DataRequest) -> DataSplits:
    if req.name.startswith("folder:"):
        return load_folder(req)
    if req.name not in DATASETS:
        raise unknown_choice("dataset", req.name, [*DATASETS, "folder:PATH"])
    return DATASETS[req.name](req)
