"""Shared fixtures: a small trained digits checkpoint, a tiny text model, generated image folders, isolated caches.

Helpers that tests call directly (``assert_user_error``, ``invoke``, ``run_laya``, the makers of
heads, folders and checkpoints) live in ``helpers``.
"""

from __future__ import annotations

import contextlib
import csv
import os
import random
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import invoke, make_image_folder, train_digits

from laya_cli.runtime import progress

# Tests never touch the user's caches or the network.
os.environ.setdefault("LAYA_OFFLINE", "1")

# Under pytest-xdist (make test: one worker per core) each worker and the laya processes it starts compute on one
# thread: a worker per core with torch's default of a thread per core oversubscribes the machine (measured: 27.6 min
# of CPU for the suite against 17.9 min in one process on 2 cores).
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LAYA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "feature-cache"))
    monkeypatch.setenv("LAYA_DATA_DIR", str(tmp_path_factory.getbasetemp() / "no-data-here"))
    with progress.enabled(False):  # library calls stay quiet; commands set their own
        yield


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler, unblocked, whatever state this test process was left in (a test that sends
    itself SIGINT failed once in a full run, the signal not raised: the worker's SIGINT state is whatever earlier
    tests on it left); restored after."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    signal.signal(signal.SIGINT, handler)


@pytest.fixture(scope="session")
def digits_ckpt(tmp_path_factory) -> Path:
    """A LAYA head + paper MLP trained briefly on digits (test accuracy well above 0.9)."""
    return train_digits(tmp_path_factory.mktemp("ckpt") / "digits-laya.pt")


@pytest.fixture(scope="session")
def digits_ckpts(tmp_path_factory) -> dict[str, Path]:
    """One checkpoint per head kind."""
    root = tmp_path_factory.mktemp("heads")
    return {h: train_digits(root / f"{h}.pt", head=h, epochs=4) for h in ("laya", "last", "concat", "scalarmix")}


@contextlib.contextmanager
def _tmpfs(mnt: Path, options: str):
    """A tmpfs mounted at ``mnt`` for the block (root only; CI runs as root), else the test is skipped."""
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.fixture()
def full_disk(tmp_path):
    """A 600 KiB tmpfs (``helpers.fill`` uses every free block of it)."""
    with _tmpfs(tmp_path / "full", "size=600k") as mnt:
        yield mnt


@pytest.fixture()
def read_only_dir(tmp_path):
    """An empty tmpfs mounted read-only: nothing can be written there, not even by root."""
    with _tmpfs(tmp_path / "ro", "size=64k,ro") as mnt:
        yield mnt


@pytest.fixture()
def image_folder(tmp_path) -> Path:
    return make_image_folder(tmp_path / "shapes")


# Texts the report must show as text, never run: markup (a script, an image whose onerror would run when pasted as
# HTML), quotes and ampersands, a text longer than the explorer shows, a line break, a character outside the BMP.
MARKUP_TEXT = '<script>window.layaPwned = 1</script><img src=x onerror="window.layaPwned = 2"> & "quoted" \'single\''
TOPICS = {
    "sport": "ball goal team match score player run win league coach".split(),
    "food": "bread cheese apple soup rice pasta salt sugar bake cook".split(),
    "tech": "computer code network chip data server cloud robot byte laser".split(),
}


def _topic_texts(n: int, seed: int) -> list[tuple[str, str]]:
    rng, filler = random.Random(seed), "the a of and with in on very some".split()
    rows = []
    for i in range(n):
        topic = list(TOPICS)[i % len(TOPICS)]
        words = rng.choices(TOPICS[topic], k=5) + rng.choices(filler, k=3)
        rng.shuffle(words)
        rows.append((" ".join(words), topic))
    return rows


def _write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(rows)


@pytest.fixture(scope="session")
def text_ckpt(tmp_path_factory) -> SimpleNamespace:
    """A laya head on a tiny BERT (3 layers, built from a config, tokenizer trained on the training split) trained
    on a made-up 3-topic csv dataset whose test split (``test.csv``, 24 rows) holds the texts above."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("text")
    config = transformers.BertConfig(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    transformers.AutoModel.from_config(config).save_pretrained(root / "bert")
    test = _topic_texts(24, seed=1)
    test[0] = (MARKUP_TEXT + " " + test[0][0], test[0][1])
    test[1] = (" ".join([test[1][0]] * 6) + " \U0001f389 end", test[1][1])  # ~300 characters
    test[2] = ("line one\nline two " + test[2][0], test[2][1])
    (root / "data").mkdir()
    _write_csv(root / "data" / "train.csv", _topic_texts(150, seed=0))
    _write_csv(root / "data" / "test.csv", test)
    ckpt = root / "text.pt"
    r = invoke(
        "train",
        "--backbone",
        f"hf:{root / 'bert'}",
        "--dataset",
        f"csv:{root / 'data'}",
        "--max-length",
        16,
        "--epochs",
        3,
        "--pool",
        "mean",
        "--out",
        ckpt,
        "-q",
    )
    assert r.exit_code == 0, r.output
    return SimpleNamespace(ckpt=ckpt, texts=[t for t, _ in test], labels=[y for _, y in test])
