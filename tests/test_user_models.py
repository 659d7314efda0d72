"""The user's own saved model: --arch module:callable / file.py:callable, and torch.export
programs (.pt2); and bad input around them — one line, exit 2, nothing written."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import assert_run_error, assert_user_error, invoke, make_image_folder
from safetensors.torch import save_file
from torch import nn

from laya_cli.backbones import usercode
from laya_cli.model.checkpoint import read_checkpoint

HERE = Path(__file__).resolve()


class TinyNet(nn.Module):
    """The user's own architecture: a stem, three stages that halve the resolution, a classifier."""

    def __init__(self, num_classes: int = 7):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.stages = nn.Sequential(
            *[
                nn.Sequential(nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU())
                for c in (8, 16, 32)
            ]
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


def build_tiny_net():
    torch.manual_seed(3)
    return TinyNet()


class DictOut(nn.Module):
    def forward(self, x):
        return {"y": x}


class Unpoolable(nn.Module):
    """Every block returns a dict: nothing to pool."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(DictOut() for _ in range(3))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)["y"]
        return x


NOT_CALLABLE = 3


def returns_int():
    return 5


def raises():
    raise ValueError("the user's constructor failed")


@pytest.fixture()
def folder(tmp_path):
    return make_image_folder(tmp_path / "shapes", per_class=8, size=16)


@pytest.fixture()
def on_folder(folder):
    """The options that train on ``folder`` at its own image size."""
    return ("--dataset", f"folder:{folder}", "--image-size", "16")


@pytest.fixture(autouse=True)
def _forget_trusted_code():
    usercode.forget_trusted()
    yield
    usercode.forget_trusted()


def test_own_architecture_with_its_weights_end_to_end(tmp_path, on_folder):
    arch = f"{HERE}:build_tiny_net"
    src = build_tiny_net()
    for p in src.parameters():
        p.data.normal_()
    weights, out = tmp_path / "w.safetensors", tmp_path / "m.pt"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(weights))
    res = invoke("train", "--arch", arch, "--weights", weights, *on_folder, "--epochs", "3", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    ckpt = read_checkpoint(out)
    spec = ckpt["backbone"]["spec"]
    assert spec["name"] == f"arch:{arch}" and not spec["finetune"] and not spec["pretrained"]
    assert ckpt["layers"] == ["stages.0", "stages.1", "stages.2"] and ckpt["dims"] == [16, 32, 64]
    torch.testing.assert_close(ckpt["backbone"]["weights"]["stem.0.weight"], src.stem[0].weight)
    assert ckpt["backbone"]["source"].startswith(f"file {weights} (sha256 ")
    assert len(ckpt["backbone"]["sha256"]) == 64 and ckpt["backbone"]["formats"] == ["NCHW"] * 3

    usercode.forget_trusted()  # a new process: the checkpoint alone never imports code
    assert_user_error(invoke("audit", out, "-q"), "your own code", "--arch")
    assert invoke("audit", out, "--arch", arch, "--compare", "ig", "--steps", "4", "-q").exit_code == 0
    res = invoke("export", out, "--arch", arch, "--out", tmp_path / "exp", "--no-plots", "-q")
    assert res.exit_code == 0, res.output
    info = json.loads(invoke("info", out, "--json").output)
    assert info["backbone"]["weights_sha256"] == ckpt["backbone"]["sha256"]


def test_own_architecture_by_module_path_without_weights(tmp_path, on_folder, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent))
    out = tmp_path / "m.pt"
    res = invoke("train", "--arch", "test_user_models:TinyNet", *on_folder, "--epochs", "2", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    ckpt = read_checkpoint(out)
    assert ckpt["backbone"]["spec"]["name"] == "arch:test_user_models:TinyNet"
    assert ckpt["backbone"]["source"] == "random initialisation"


def export_program(path: Path, model: nn.Module, side: int = 16, dynamic: bool = True) -> Path:
    model.eval()
    x = torch.rand(2, 3, side, side)
    shapes = {"x": {0: torch.export.Dim("batch")}} if dynamic else None
    torch.export.save(torch.export.export(model, (x,), dynamic_shapes=shapes), str(path))
    return path


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> bytes:
    """TinyNet exported with a dynamic batch (exporting takes seconds: once per module)."""
    return export_program(tmp_path_factory.mktemp("pt2") / "net.pt2", build_tiny_net()).read_bytes()


def test_torch_export_program_end_to_end(tmp_path, folder, program):
    pt2 = tmp_path / "net.pt2"
    pt2.write_bytes(program)
    out = tmp_path / "m.pt"
    res = invoke("train", "--backbone", pt2, "--dataset", f"folder:{folder}", "--epochs", "3", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    ckpt = read_checkpoint(out)
    assert ckpt["backbone"]["spec"]["name"] == f"pt2:{pt2}"
    assert ckpt["layers"] == ["stages.0", "stages.1", "stages.2"] and ckpt["dims"] == [16, 32, 64]
    assert ckpt["backbone"]["weights"] is None and ckpt["backbone"]["program"].dtype == torch.uint8
    assert ckpt["dataset"]["image_size"] == 16  # the program's own input size
    pt2.unlink()  # the checkpoint carries the program
    assert invoke("audit", out, "--compare", "ig", "--steps", "4", "-q").exit_code == 0
    res = invoke("export", out, "--out", tmp_path / "exp", "--no-plots", "-q")
    assert res.exit_code == 0, res.output


def test_torch_export_program_taps_by_module_name(tmp_path, program):
    from laya_cli import backbones as bb

    pt2 = tmp_path / "net.pt2"
    pt2.write_bytes(program)
    ref = build_tiny_net().eval()
    b = bb.build_backbone(
        bb.BackboneSpec(bb.backbone_name(str(pt2)), ["stem", "stages.*"], in_channels=3, image_size=(16, 16))
    )
    x = torch.rand(4, 3, 16, 16)
    plain = bb.TappedBackbone(ref, b.input_cfg, ["stem", "stages.0", "stages.1", "stages.2"], "mean")
    with torch.no_grad():
        for a, c in zip(b(x), plain(x)):
            torch.testing.assert_close(a, c)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "arch,fragments",
    [
        ("no_such_module_xyz:Net", ["cannot import no_such_module_xyz", "ModuleNotFoundError"]),
        ("/no/such/file.py:Net", ["file not found"]),
        (f"{HERE}:NoSuchThing", ["has no attribute 'NoSuchThing'"]),
        (f"{HERE}:NOT_CALLABLE", ["is a int, not a callable"]),
        (f"{HERE}:returns_int", ["returned a int, not a torch.nn.Module"]),
        (f"{HERE}:raises", ["raised ValueError", "the user's constructor failed"]),
        ("justaname", ["expected module.path:callable"]),
    ],
)
def test_bad_arch_is_one_line(tmp_path, on_folder, arch, fragments):
    out = tmp_path / "m.pt"
    res = invoke("train", "--arch", arch, *on_folder, "--out", out)
    assert_user_error(res, *fragments)
    assert not out.exists()


def test_corrupt_and_unsafe_programs_are_refused(tmp_path, folder, program):
    out = tmp_path / "m.pt"

    def refused(pt2, *fragments):
        assert_user_error(invoke("train", "--backbone", pt2, "--dataset", f"folder:{folder}", "--out", out), *fragments)
        assert not out.exists()

    good = program
    (tmp_path / "good.pt2").write_bytes(good)
    (tmp_path / "garbage.pt2").write_bytes(b"not a zip at all" * 10)
    refused(tmp_path / "garbage.pt2", "not a torch.export program", "not a zip archive")
    (tmp_path / "cut.pt2").write_bytes(good[: len(good) // 2])
    refused(tmp_path / "cut.pt2", "not a zip archive")
    (tmp_path / "empty.pt2").write_bytes(b"")
    refused(tmp_path / "empty.pt2", "empty")
    refused(tmp_path / "missing.pt2", "not found")
    export_program(tmp_path / "fixed.pt2", build_tiny_net(), dynamic=False)
    refused(tmp_path / "fixed.pt2", "fixed batch size 2", "dynamic_shapes")

    # A pickle that would create a file if anything unpickled it: refused, never run.
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    def rewrite(name, edit):
        buf = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(good)) as zin, zipfile.ZipFile(buf, "w") as zout:
            for item in zin.infolist():
                zout.writestr(item, edit(item.filename, zin.read(item.filename)))
        (tmp_path / name).write_bytes(buf.getvalue())
        return tmp_path / name

    evil_inputs = rewrite("evil.pt2", lambda n, b: pickle.dumps(Evil()) if n.endswith("sample_inputs/model.pt") else b)
    refused(evil_inputs, "pickled sample inputs", "laya refuses")

    def pickled_weight(n, b):
        if n.endswith("model_weights_config.json"):
            cfg = json.loads(b)
            next(iter(cfg["config"].values()))["use_pickle"] = True
            return json.dumps(cfg).encode()
        return b

    refused(rewrite("pickled.pt2", pickled_weight), "pickled weights", "--trust-pickle")
    assert not marker.exists()
    assert_user_error(
        invoke(
            "train", "--backbone", tmp_path / "good.pt2", "--finetune", "--dataset", f"folder:{folder}", "--out", out
        ),
        "drop --finetune",
    )


def test_unpoolable_taps_and_empty_globs_are_one_line(tmp_path, folder, on_folder):
    out = tmp_path / "m.pt"
    res = invoke("train", "--arch", f"{HERE}:Unpoolable", "--layers", "blocks.*", *on_folder, "--out", out)
    assert_run_error(res, "outputs a dict", "cannot be pooled")
    res = invoke("train", "--arch", f"{HERE}:build_tiny_net", "--layers", "nothing.here*", *on_folder, "--out", out)
    assert_user_error(res, "matched no module", "stages")
    res = invoke(
        "train", "--arch", f"{HERE}:build_tiny_net", "--backbone", "cnn", "--dataset", f"folder:{folder}", "--out", out
    )
    assert_user_error(res, "drop --backbone")
    assert not out.exists()
