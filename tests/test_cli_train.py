"""`laya train` and `laya info` from the outside: CliRunner and real subprocesses."""

import json
import os

import pytest
import torch
from helpers import assert_user_error, invoke, run_laya

BAD_TRAIN = [
    (["--backbone", "mlpp"], ["unknown backbone 'mlpp'", "did you mean mlp"]),
    (["--backbone", "timm:vit_tiny_patch16_22"], ["did you mean vit_tiny_patch16_224"]),
    (["--backbone", "torchvision:resnet1"], ["unknown torchvision model", "resnet18"]),
    (["--dataset", "digitz"], ["did you mean digits"]),
    (["--head", "scalarmx"], ["did you mean scalarmix"]),
    (["--dataset", "cifar10"], ["CIFAR10 not found", "looked in", "--data-dir"]),
    (["--dataset", "artworks"], ["artworks not found", "artists.csv"]),
    (["--dataset", "folder:/no/such/folder"], ["image folder not found"]),
    (["--tau", "0"], ["--tau must be positive"]),
    (["--tau", "-2"], ["--tau must be positive"]),
    (["--d-star", "0"], ["--d-star must be positive"]),
    (["--epochs", "0"], ["--epochs must be at least 1"]),
    (["--batch-size", "0"], ["--batch-size must be at least 1"]),
    (["--psi", "relu"], ["unknown --psi"]),
    (["--backbone", "timm:resnet18", "--weights", "/no/such/w.pt"], ["weights file not found"]),
]


@pytest.mark.parametrize("args,fragments", BAD_TRAIN, ids=[" ".join(a) for a, _ in BAD_TRAIN])
def test_bad_train_input_is_one_line_and_exit_2(tmp_path, args, fragments):
    out = tmp_path / "m.pt"
    result = invoke("train", "--out", out, "--epochs", "1", "-q", *args)
    assert_user_error(result, *fragments)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temp file


def test_fashion_mnist_missing_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr("laya_cli.data.datasets.DEBIAN_FASHION_MNIST", tmp_path / "debian")
    result = invoke("train", "--dataset", "fashion-mnist", "--out", tmp_path / "m.pt")
    assert_user_error(
        result, "FashionMNIST not found", str(tmp_path / "debian"), "apt-get install dataset-fashion-mnist"
    )


@pytest.mark.parametrize("dataset", ["fashion-mnist", "cifar10", "artworks"])
@pytest.mark.parametrize("exists", [False, True])
def test_an_explicit_data_dir_without_the_data_is_an_error_not_a_fallback(tmp_path, monkeypatch, dataset, exists):
    """A typo in --data-dir must not silently train on the system's copy (and record the typo)."""
    typo = tmp_path / "typo"
    if exists:
        typo.mkdir()
    result = invoke("train", "--dataset", dataset, "--data-dir", typo, "--out", tmp_path / "m.pt", "-q")
    assert_user_error(
        result, f"--data-dir {typo}", "no such folder" if not exists else f"does not hold {dataset}", str(typo) + "/"
    )
    assert not (tmp_path / "m.pt").exists()


def test_data_dir_for_a_dataset_that_has_none_is_an_error(tmp_path, image_folder):
    assert_user_error(
        invoke("train", "--data-dir", tmp_path, "-q", "--out", tmp_path / "m.pt"), "does not apply to digits"
    )
    assert_user_error(
        invoke(
            "train", "--dataset", f"folder:{image_folder}", "--data-dir", tmp_path, "-q", "--out", tmp_path / "m.pt"
        ),
        "does not apply to folder:PATH",
    )


@pytest.mark.parametrize("out", ["/no/such/dir/m.pt", ".", "/proc/m.pt"])
def test_unwritable_out_fails_before_training(out):
    assert_user_error(invoke("train", "--out", out, "-q"), "cannot write")


def test_unwritable_out_folder(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_user_error(invoke("train", "--out", locked / "m.pt", "-q"), "not writable")


def test_garbage_weights_file(tmp_path):
    bad = tmp_path / "w.pt"
    bad.write_bytes(os.urandom(256))
    assert_user_error(
        invoke("train", "--backbone", "timm:resnet18", "--weights", bad, "--out", tmp_path / "m.pt"), "corrupt"
    )
    assert not (tmp_path / "m.pt").exists()


def test_weights_that_do_not_fit_the_arch(tmp_path):
    torch.save({"conv1.weight": torch.zeros(3)}, tmp_path / "w.pt")
    assert_user_error(
        invoke("train", "--backbone", "timm:resnet18", "--weights", tmp_path / "w.pt", "--out", tmp_path / "m.pt"),
        "weights do not fit timm:resnet18",
    )


@pytest.mark.parametrize("content", [b"", b"garbage", os.urandom(300)], ids=["empty", "text", "random"])
def test_info_on_unreadable_checkpoint(tmp_path, content):
    p = tmp_path / "m.pt"
    p.write_bytes(content)
    assert_user_error(invoke("info", p), str(p))


def test_info_on_truncated_checkpoint(tmp_path, digits_ckpt):
    p = tmp_path / "m.pt"
    p.write_bytes(digits_ckpt.read_bytes()[:4000])
    assert_user_error(invoke("info", p), "corrupt or truncated")


def test_info_on_a_foreign_torch_file(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "m.pt")
    assert_user_error(invoke("info", tmp_path / "m.pt"), "not a laya checkpoint")


def test_info_on_a_newer_format(tmp_path, digits_ckpt):
    ckpt = torch.load(digits_ckpt, weights_only=True)
    ckpt["format_version"] = 99
    torch.save(ckpt, tmp_path / "m.pt")
    assert_user_error(invoke("info", tmp_path / "m.pt"), "format version 99", "upgrade laya")


def test_info_json_has_the_documented_fields(digits_ckpt):
    result = invoke("info", digits_ckpt, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["head"]["kind"] == "laya"
    assert info["backbone"]["name"] == "mlp"
    assert info["layers"] == ["blocks.0", "blocks.1", "blocks.2"]
    assert info["classes"] == [str(i) for i in range(10)]
    assert 0.9 <= info["metrics"]["test_accuracy"] <= 1.0
    assert 0.0 < info["metrics"]["test_macro_f1"] <= 1.0


def test_info_panel(digits_ckpt):
    result = invoke("info", digits_ckpt)
    assert result.exit_code == 0
    assert "test accuracy" in result.output and "blocks.0" in result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "mlp (fine-tuned)" in text and "pool" not in text  # an MLP's taps are vectors: nothing to pool
    assert "(SHA-256 " in text  # the weights' source and their digest, not run together
    for option in ("--epochs", "--lr", "--seed", "--patience", "--stop-on", "--alpha-entropy", "--tau-start none"):
        assert option in text, text  # every training option the checkpoint records


def test_info_lists_training_options_as_they_read():
    from laya_cli.report.info import training_text

    config = {"epochs": 2, "lr": 0.0003, "tau_start": None, "pretrained": True, "finetune": False, "layers": []}
    assert (
        training_text(config)
        == "--epochs 2 · --lr 0.0003 · --tau-start none · --pretrained · --no-finetune · --layers none"
    )
    assert training_text({"out": "m.pt", "seed": 1}, ("out",)) == "--seed 1" and training_text(None) is None


def test_train_cli_writes_a_checkpoint_and_reports_test_metrics(tmp_path):
    out = tmp_path / "m.pt"
    # names are case-insensitive; the checkpoint records the canonical ones
    result = invoke(
        "train",
        "--out",
        out,
        "--epochs",
        "3",
        "--head",
        "ScalarMix",
        "--dataset",
        "Digits",
        "--psi",
        "Identity",
        "--d-star",
        "16",
        "--seed",
        "1",
    )
    assert result.exit_code == 0, result.output
    from laya_cli.model.checkpoint import read_checkpoint

    ckpt = read_checkpoint(out)
    assert ckpt["head"]["kind"] == "scalarmix" and ckpt["dataset"]["name"] == "digits"
    assert ckpt["head"]["config"]["psi"] == "identity"
    assert "epoch   1" in result.output and "test accuracy" in result.output
    assert torch.load(out, weights_only=True)["head"]["kind"] == "scalarmix"
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]


def test_subprocess_train_then_info(tmp_path):
    proc = run_laya("train", "--out", tmp_path / "m.pt", "--epochs", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "test accuracy" in proc.stdout
    info = run_laya("info", tmp_path / "m.pt", "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["metrics"]["epochs_run"] == 2


def test_subprocess_user_error_has_no_traceback(tmp_path):
    proc = run_laya("train", "--tau", "0", "--out", tmp_path / "m.pt")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --tau must be positive, got 0.0"]
    assert proc.stdout == ""


def test_usage_error_is_exit_2():
    assert invoke("train", "--no-such-option").exit_code == 2
