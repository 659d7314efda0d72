"""What laya reads from others (issue 72): attached results checked by type, no model folder's code run, no link
followed for a file laya owns, data that is not what it seems (hidden folders, empty classes, a column named twice,
one enormous line, a decompression bomb), an interrupt inside a write, and inputs refused before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
import torch
from helpers import assert_user_error, invoke, make_image_folder, make_lm_folder, sentences

from laya_cli.runtime.errors import LayaError

# --------------------------------------------------------------------------- attached results, by type

AUDIT = {"settings": {"dataset": "digits"}, "n_samples": 3, "accuracy": 0.5, "layers": ["a", "b"],
         "methods": {"laya": {"faithfulness": 0.1, "deletion@1": None, "defined": 3, "ci": {}}},
         "verdict": {"passed": True, "checks": 0, "failed": 0, "skipped": 0}, "notes": ["fine"]}  # fmt: skip


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        (("n_samples",), "<img src=x onerror=alert(1)>", "n_samples is a text, not a number"),
        (("verdict", "checks"), "<svg onload=alert(1)>", "verdict.checks is a text, not a number"),
        (("methods", "laya", "faithfulness"), "0.9", "methods.laya.faithfulness is a text"),
        (("notes",), [{"html": "<b>"}], "notes[0] is dict, not a text"),
        (("layers",), "a", "layers is not a list"),
        (("options",), {"command": "audit", "values": {"x\n```": 1}}, "has a key that is no name"),
    ],
)
def test_an_attached_audit_is_checked_by_type_not_by_keys(tmp_path, where, value, named):
    from laya_cli.gates.regression import read_audit_json

    doc = json.loads(json.dumps(AUDIT))
    inner = doc
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    (tmp_path / "a.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(LayaError, match="is not a laya audit JSON") as e:
        read_audit_json(tmp_path / "a.json", "--audit")
    assert named in str(e.value)
    (tmp_path / "ok.json").write_text(json.dumps(AUDIT), encoding="utf-8")
    assert read_audit_json(tmp_path / "ok.json")["n_samples"] == 3


SKELETON = {"format": "laya-depth", "layers": ["blocks.0", "blocks.1", "blocks.2"]}


def test_a_skeletal_depth_result_given_is_one_line_and_found_beside_is_a_note(digits_ckpt, tmp_path):
    skeleton = tmp_path / "skeleton.json"
    skeleton.write_text(json.dumps(SKELETON), encoding="utf-8")
    r = invoke("export", digits_ckpt, "--out", tmp_path / "a", "--no-plots", "--depth", skeleton, "-q")
    assert_user_error(r, "is not a laya depth result", "n_samples is missing")
    assert not (tmp_path / "a").exists()
    ckpt = shutil.copy(digits_ckpt, tmp_path / "m.pt")
    (tmp_path / "m.depth.json").write_text(json.dumps(SKELETON), encoding="utf-8")
    r = invoke("export", ckpt, "--out", tmp_path / "b", "--no-plots", "-q")
    assert r.exit_code == 0, r.output
    assert "m.depth.json beside the checkpoint was not shown" in r.output and "n_samples is missing" in r.output
    assert not (tmp_path / "b" / "depth.json").exists()


# --------------------------------------------------------------------------- no model folder's code


def _custom_code_folder(root, known_type: bool):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)  # fmt: skip
    transformers.AutoModel.from_config(config).save_pretrained(root)
    record = json.loads((root / "config.json").read_text())
    record["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    if not known_type:
        record["model_type"] = "laya-test-evil"
    (root / "config.json").write_text(json.dumps(record))
    marker = root / "RAN"
    (root / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import BertConfig, BertModel\n"
        f"class EvilConfig(BertConfig):\n    model_type = {record['model_type']!r}\n"
        "class EvilModel(BertModel):\n    config_class = EvilConfig\n"
    )
    return marker


@pytest.mark.parametrize("known_type", [True, False], ids=["bert-with-auto_map", "unknown-model-type"])
def test_a_model_folder_that_names_its_own_code_is_refused_and_nothing_runs(tmp_path, texts_folder, known_type):
    marker = _custom_code_folder(tmp_path / "model", known_type)
    r = invoke("train", "--backbone", f"hf:{tmp_path / 'model'}", "--dataset", f"csv:{texts_folder}", "--max-length",
               8, "--epochs", 1, "--out", tmp_path / "m.pt", input="y\ny\n")  # fmt: skip
    assert_user_error(r, "asks to run code of its own", "laya never runs a model folder's code")
    assert not marker.exists() and not (tmp_path / "m.pt").exists()


@pytest.fixture()
def texts_folder(tmp_path):
    rows = ["text,label", *(f"word{i % 2} other{i},c{i % 2}" for i in range(40))]
    (tmp_path / "data").mkdir()
    for split in ("train", "test"):
        (tmp_path / "data" / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return tmp_path / "data"


def test_every_transformers_call_passes_trust_remote_code_false():
    """Every call that reads a folder or the hub (from_pretrained, from_config) passes NO_REMOTE_CODE."""
    import re
    from pathlib import Path

    import laya_cli

    root = Path(laya_cli.__file__).parent
    calls = []
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"\.(from_pretrained|from_config)\(", text):
            depth, end = 1, m.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
            calls.append((path.name, text[m.start() : end]))
    assert calls and all("NO_REMOTE_CODE" in call for _, call in calls), [c for c in calls if "NO_REMOTE" not in c[1]]


# --------------------------------------------------------------------------- links


def test_a_lock_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path):
    from laya_cli.runtime import fileio

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ".m.pt.laya-lock").symlink_to(victim)
    with fileio.claims(), pytest.raises(LayaError, match="is a symbolic link; laya never writes through a link"):
        fileio.claim(tmp_path / "m.pt")
    assert victim.read_text() == "precious" and (tmp_path / ".m.pt.laya-lock").is_symlink()


# --------------------------------------------------------------------------- data


def test_hidden_folders_are_no_class_and_an_empty_class_is_named(tmp_path, monkeypatch):
    from PIL import Image

    from laya_cli.data.datasets import labelled_files
    from laya_cli.runtime import progress

    root = make_image_folder(tmp_path / "shapes", per_class=2)
    (root / ".ipynb_checkpoints").mkdir()
    Image.new("RGB", (8, 8)).save(root / ".ipynb_checkpoints" / "x.png")
    Image.new("RGB", (8, 8)).save(root / "circle" / "._x.png")
    (root / "empty").mkdir()
    said = []
    monkeypatch.setattr(progress, "log", lambda message, style="": said.append(message))
    files, labels = labelled_files(root)
    assert sorted(set(labels)) == ["circle", "cross", "square"] and len(files) == 6
    assert said == [f"note: {root / 'empty'} holds no image file: not a class"]


@pytest.mark.parametrize("header", ["text,label,label", "text,text,label"])
def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, header):
    from laya_cli.data.textfiles import read_csv

    (tmp_path / "train.csv").write_text(f"{header}\na,b,c\n", encoding="utf-8")
    with pytest.raises(LayaError, match="more than once"):
        read_csv(tmp_path / "train.csv", "text", "label", None)


def test_a_long_line_is_read_in_pieces_that_make_the_same_blocks(tmp_path, monkeypatch):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from laya_cli.data import corpus as c

    words = [f"wörd{i % 50}" for i in range(3000)]
    (tmp_path / "train.txt").write_text("short one\n" + " ".join(words) + "\nlast line\n", encoding="utf-8")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(sorted({*words, "short", "one", "last", "line"}))}))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    whole = list(c.token_blocks(c.open_corpus(str(tmp_path / "train.txt")).documents("train"), tok.to_str(), 7, 99))
    monkeypatch.setattr(c, "PIECE", 64)
    pieces = list(c.open_corpus(str(tmp_path / "train.txt")).documents("train"))
    assert sum(isinstance(p, c.Continued) for p in pieces) > 100 and max(map(len, pieces)) <= 2 * 64
    chunked = list(c.token_blocks(iter(pieces), tok.to_str(), 7, 99))
    assert len(chunked) == len(whole) and all(torch.equal(a, b) for a, b in zip(chunked, whole))


def test_a_decompression_bomb_is_one_undecodable_image(tmp_path, monkeypatch):
    from PIL import Image

    from laya_cli.data.images import FileSource, _try_decode

    Image.new("L", (64, 64)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # warns above 1,000 pixels, fails above 2,000
    Image.new("L", (40, 40)).save(tmp_path / "warned.png")  # 1,600: Pillow would warn and decode
    for name in ("warned.png", "big.png"):
        image, error = _try_decode(FileSource([str(tmp_path / name)]), 0, 8)
        assert image is None and error.startswith("DecompressionBomb")


# --------------------------------------------------------------------------- an interrupt inside a write


def test_an_interrupt_inside_torch_save_is_the_interrupt_and_the_old_file_stays(tmp_path, monkeypatch, default_sigint):
    import io

    from laya_cli.runtime import fileio

    class Interrupted(io.FileIO):
        writes = 0

        def write(self, data):
            Interrupted.writes += 1
            if Interrupted.writes == 3:  # the real signal, delivered while torch's C++ writer is writing
                os.kill(os.getpid(), signal.SIGINT)
            return super().write(data)

    path = tmp_path / "m.pt.state"
    torch.save({"old": torch.zeros(3)}, path)
    monkeypatch.setattr(fileio, "open", lambda p, mode="r": Interrupted(p, "wb"), raising=False)
    with pytest.raises(KeyboardInterrupt):
        fileio.atomic_torch_save({"new": torch.zeros(100_000), "more": torch.ones(1000)}, path)
    assert list(torch.load(path, weights_only=True)) == ["old"]
    assert sorted(os.listdir(tmp_path)) == ["m.pt.state"]


# --------------------------------------------------------------------------- refused before anything starts


def test_the_api_names_the_images_a_model_takes(digits_ckpt):
    from torch.utils.data import DataLoader, TensorDataset

    import laya_cli

    model = laya_cli.load(digits_ckpt)
    loader = DataLoader(TensorDataset(torch.rand(8, 3, 32, 32), torch.zeros(8, dtype=torch.long)), batch_size=4)
    with pytest.raises(LayaError, match=r"images of shape 4×3×32×32, but this model takes B×1×8×8 batches"):
        laya_cli.audit(model, loader, compare="", progress=False)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    return make_lm_folder(tmp_path_factory.mktemp("lm-inputs"), sentences(200), 180)


def _corpus(root, train: str | bytes, test: str | None = None):
    root.mkdir()
    write = (root / "train.txt").write_bytes if isinstance(train, bytes) else (root / "train.txt").write_text
    write(train)
    if test is not None:
        (root / "test.txt").write_text(test)
    return root


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("empty", "the training text is shorter than one block: it is empty"),
        ("blank", "the training text is shorter than one block: it is empty"),
        ("binary", "train.txt"),
        ("short", "the held-out text is shorter than one block: it is empty"),
        ("short-held-out", "the held-out text is shorter than one block of 16 tokens"),
        ("block-size", "--block-size 1000: the model reads 2 to 64 positions"),
    ],
)
def test_language_model_inputs_are_refused_before_the_start_is_announced(lm_dir, tmp_path, case, named):
    text = (lm_dir / "corpus" / "train.txt").read_text()
    corpus = {
        "empty": lambda: _corpus(tmp_path / "c", ""),
        "blank": lambda: _corpus(tmp_path / "c", "  \n\n \t\n"),
        "binary": lambda: _corpus(tmp_path / "c", bytes(range(256)) * 20),
        "short": lambda: _corpus(tmp_path / "c", "a b\n"),
        "short-held-out": lambda: _corpus(tmp_path / "c", text, "a b\n"),
        "block-size": lambda: lm_dir / "corpus",
    }[case]()
    block = "1000" if case == "block-size" else "16"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{corpus}",
               "--block-size", block, "--epochs", 1, "--out", tmp_path / "m.pt")  # fmt: skip
    assert_user_error(r, named)
