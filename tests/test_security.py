"""Untrusted files: a pickle that would run code never runs, whatever the command."""

import os
import pickle
from pathlib import Path

import pytest
import torch
from helpers import invoke


class Payload:
    """Unpickling this runs `touch MARKER` — the classic malicious model file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def malicious_files(tmp_path: Path) -> dict[str, Path]:
    marker = tmp_path / "PWNED"
    files = {}
    # torch.save zip container, payload inside an otherwise laya-looking dict
    files["torch-zip"] = tmp_path / "zip.pt"
    torch.save({"format": "laya-checkpoint", "format_version": 1, "x": Payload(marker)}, files["torch-zip"])
    # a raw pickle stream (what older tools write)
    files["raw-pickle"] = tmp_path / "raw.pt"
    files["raw-pickle"].write_bytes(pickle.dumps(Payload(marker), protocol=2))
    return files


def commands(path: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "info": ["info", str(path)],
        "audit": ["audit", str(path), "--samples", "5"],
        "export": ["export", str(path), "--out", str(tmp_path / "exp")],
        "train --weights": [
            "train",
            "--backbone",
            "timm:resnet18",
            "--weights",
            str(path),
            "--out",
            str(tmp_path / "m.pt"),
        ],
    }


@pytest.mark.parametrize("kind", ["torch-zip", "raw-pickle"])
@pytest.mark.parametrize("command", ["info", "audit", "export", "train --weights"])
def test_malicious_pickle_never_runs(tmp_path, kind, command):
    path = malicious_files(tmp_path)[kind]
    result = invoke(*commands(path, tmp_path)[command])
    assert not (tmp_path / "PWNED").exists(), "the payload ran"
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "pickled Python objects" in result.output or "corrupt" in result.output
    assert not (tmp_path / "exp").exists() and not (tmp_path / "m.pt").exists()


def test_weights_refusal_names_the_only_door(tmp_path):
    path = malicious_files(tmp_path)["torch-zip"]
    result = invoke(*commands(path, tmp_path)["train --weights"])
    assert "--trust-pickle" in result.output


def test_trust_pickle_is_the_only_door_and_warns(tmp_path):
    import timm

    model = timm.create_model("resnet18", pretrained=False, num_classes=3)
    torch.save(model, tmp_path / "module.pt")  # a fully pickled nn.Module
    refused = invoke(
        *[
            "train",
            "--backbone",
            "timm:resnet18",
            "--weights",
            str(tmp_path / "module.pt"),
            "--out",
            str(tmp_path / "a.pt"),
            "--epochs",
            "1",
            "--dataset",
            "digits",
            "-q",
        ]
    )
    assert refused.exit_code == 2 and "--trust-pickle" in refused.output
    from laya_cli import backbones as bb

    loaded = bb.read_weights_file(tmp_path / "module.pt", trust_pickle=True)
    assert isinstance(loaded, torch.nn.Module)
    torch.testing.assert_close(loaded.conv1.weight, model.conv1.weight)


def test_no_unsafe_torch_load_in_the_library():
    src = Path(__file__).resolve().parents[1] / "laya_cli"
    offenders = []
    for f in src.glob("*.py"):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if "torch.load(" in line and "weights_only=True" not in line and f.name != "trust.py":
                offenders.append(f"{f.name}:{i}")
    assert offenders == []


@pytest.mark.parametrize("content", ["empty", "random", "truncated", "newer"])
@pytest.mark.parametrize("command", ["info", "audit", "export"])
def test_corrupt_checkpoints_are_one_line_errors_everywhere(tmp_path, digits_ckpt, content, command):
    path = tmp_path / "m.pt"
    if content == "empty":
        path.write_bytes(b"")
    elif content == "random":
        path.write_bytes(bytes(range(256)) * 3)
    elif content == "truncated":
        path.write_bytes(digits_ckpt.read_bytes()[:5000])
    else:
        ckpt = torch.load(digits_ckpt, weights_only=True)
        ckpt["format_version"] = 2
        torch.save(ckpt, path)
    args = commands(path, tmp_path)[command]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert not (tmp_path / "exp").exists()
