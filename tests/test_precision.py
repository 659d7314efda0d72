"""--precision auto|bf16|fp32, pinned decode loaders on CUDA machines, and the GPU benchmark's script. No GPU
here: the CUDA branches run with torch.cuda's capability checks replaced, and the benchmark's code path runs
on the CPU (its figures are then no measurement)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_user_error, invoke

from laya_cli.data import images
from laya_cli.runtime import device
from laya_cli.runtime.errors import LayaError


@pytest.fixture
def fake_bf16_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def test_bf16_is_refused_off_cuda_and_the_rest_is_spelled_canonically():
    with pytest.raises(LayaError, match="needs a bf16-capable CUDA device .*this run is on cpu"):
        device.check_precision("bf16", "cpu")
    assert device.check_precision("FP32", "cpu") == "fp32"
    assert device.check_precision("auto", "cpu") == "auto"
    with pytest.raises(LayaError, match="--precision"):
        device.check_precision("fp8", "cpu")
    with device.precision("bf16"):  # even asked for, nothing runs in bf16 on the CPU
        assert device.resolved_precision("cpu") == "fp32" and device.feature_precision("cpu") is None


def test_precision_decides_cuda_autocast(fake_bf16_cuda, monkeypatch):
    assert device.check_precision("bf16", "cuda:0") == "bf16"
    assert device.resolved_precision("cuda") == "bf16"  # auto: bf16 where CUDA supports it (as before)
    with device.precision("fp32"):
        assert not device.bf16_enabled("cuda") and device.feature_precision("cuda") is None
        assert isinstance(device.autocast("cuda"), type(device.autocast("cpu")))  # no autocast
    monkeypatch.setattr(device, "_bf16_allowed", lambda: False)  # LAYA_BF16=0
    assert device.resolved_precision("cuda") == "fp32"
    with device.precision("bf16"):  # asked for explicitly: overrides LAYA_BF16=0
        assert device.bf16_enabled("cuda") and device.feature_precision("cuda") == "bf16"
    assert device.resolved_precision("cuda") == "fp32"  # the context is gone


def test_bf16_not_supported_by_the_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(LayaError, match="bf16-capable"):
        device.check_precision("bf16", "cuda")


@pytest.mark.parametrize("command", ["audit", "train"])
def test_bf16_on_the_cpu_is_a_one_line_error(digits_ckpt, command, tmp_path):
    args = [str(digits_ckpt)] if command == "audit" else ["--epochs", "1", "--out", str(tmp_path / "m.pt")]
    r = invoke(command, *args, "--precision", "bf16", "--device", "cpu")
    assert_user_error(r, "--precision bf16", "CUDA")
    assert not (tmp_path / "m.pt").exists()


def test_precision_is_recorded_in_the_audit_and_the_checkpoint(digits_ckpt, tmp_path):
    out = tmp_path / "a.json"
    r = invoke("audit", str(digits_ckpt), "--samples", "20", "--steps", "2", "--precision", "fp32", "--json", str(out))
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["settings"]["precision"] == "fp32"
    r = invoke("train", "--epochs", "1", "--out", str(tmp_path / "m.pt"), "-q")
    assert r.exit_code == 0, r.output
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    assert ckpt["train_config"]["precision"] == "fp32"  # auto on a CPU: recorded as what ran


def test_precision_is_not_part_of_a_runs_fingerprint():
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    a, b = TrainJobSettings(), TrainJobSettings(train=TrainingSettings(precision="bf16"))
    assert a.fingerprint() == b.fingerprint()  # like the device: --resume across machines keeps working


def test_decode_workers_hand_back_pinned_batches_on_cuda_machines(fake_bf16_cuda, monkeypatch):
    seen = []
    monkeypatch.setattr(images, "DataLoader", lambda work, **kw: seen.append(kw) or [])
    monkeypatch.setenv("LAYA_WORKERS", "1")
    list(images._decoded(None, 8, [[0, 1]]))
    list(images._decoded(None, 8, [[0, 1]], keep=False))  # the scan throws the pixels away: nothing to pin
    assert [kw["pin_memory"] for kw in seen] == [True, False]
    monkeypatch.setenv("LAYA_PIN_MEMORY", "0")
    assert not images.pin_loaders()


def test_no_pinned_loaders_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not images.pin_loaders()


def test_gpu_benchmark_without_cuda_prints_one_line_and_measures_nothing(monkeypatch, capsys):
    from benchmarks import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main([]) == {"cuda": False}
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("no CUDA device")


@pytest.mark.slow
def test_gpu_benchmark_code_path_runs_on_the_cpu():
    """The script's own code (extraction at both precisions, audit and plain inference) on a small ViT and the
    CPU, so the GPU run does not meet a bug first; on the CPU both precisions are float32."""
    from benchmarks import gpu

    r = gpu.run(images=4, audit_images=2, steps=2, repeats=1, device="cpu", name="vit_tiny_patch16_224")
    assert r["extract_fp32_img_s"] > 0 and r["extract_bf16_img_s"] > 0 and r["audit_over_plain_bf16"] > 0
    assert len(gpu.report(r)) == 6


@pytest.mark.slow  # about 13 s alone on 2 busy cores (three train_lm epochs and fifteen audits), 45 s when loaded
def test_gpu_benchmark_lm_case_code_path_runs_on_the_cpu(tmp_path, capsys):
    """``--case lm`` end to end on a tiny GPT-2 and the CPU (the hidden ``--device cpu``), so the first GPU run
    does not meet a bug: the model's forward, one epoch of ``train_lm`` and the per-token audit at both precisions
    (float32 both, on the CPU), the ratios printed with the issue's targets beside them and written to --json; the
    ViT case not run."""
    from benchmarks import gpu

    out = tmp_path / "figures.json"
    argv = ["--case", "lm", "--device", "cpu", "--layers", "2", "--width", "32", "--vocab", "512", "--glosses", "60",
            "--block-size", "16", "--batch", "8", "--eval-tokens", "64", "--audit-samples", "4", "--out",
            str(tmp_path / "work"), "--json", str(out)]  # fmt: skip
    r = gpu.main(argv)
    assert set(r) == {"lm"} and json.loads(out.read_text()) == json.loads(json.dumps(r))
    lm = r["lm"]
    assert lm["model"] == "gpt2 2x32 v512" and lm["positions"] == 4 and lm["tokens"] % 16 == 0
    for p in ("fp32", "bf16"):
        assert lm[f"train_over_forward_{p}"] > 0 and lm[f"audit_over_forward_{p}"] > 0
        assert (tmp_path / "work" / f"lm-{p}.pt").is_file()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-len(gpu.lm_report(lm)) :] == gpu.lm_report(lm)
    assert sum("target ≤ 3×" in line for line in lines) == 4 and not any("images/s" in line for line in lines)


@pytest.mark.parametrize("case", ["lm", "vit,lm"])
def test_gpu_benchmark_cases_without_cuda_print_one_line(monkeypatch, capsys, case):
    from benchmarks import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--case", case]) == {"cuda": False}
    assert len(capsys.readouterr().out.strip().splitlines()) == 1


def test_gpu_benchmark_refuses_an_unknown_case(capsys):
    from benchmarks import gpu

    with pytest.raises(SystemExit) as e:
        gpu.main(["--case", "vit,bert"])
    assert e.value.code == 2 and "vit, lm" in capsys.readouterr().err
