"""Faults from the operating system while writing (a full disk) are one line and exit 2, with nothing
partial left behind; a finished training whose checkpoint cannot be written stays resumable."""

from __future__ import annotations

import errno
import json
import os

import pytest
from helpers import assert_run_error, fill, invoke, run_laya

DIGITS = ["--epochs", "2", "--d-star", "16", "--score-hidden", "16", "--seed", "3"]


def one_error_line(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for f in fragments:
        assert f in " ".join(proc.stderr.split()), proc.stderr


def test_train_on_a_full_disk(full_disk):
    proc = run_laya("train", "--out", full_disk / "m.pt", *DIGITS, "-q")  # the first epoch's state does not fit
    one_error_line(proc, f"cannot write {full_disk / 'm.pt.state'}", "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == []


def test_audit_json_on_a_full_disk(digits_ckpt, full_disk):
    fill(full_disk)
    proc = run_laya("audit", digits_ckpt, "--samples", 30, "--compare", "", "--json", full_disk / "a.json", "-q")
    one_error_line(proc, f"cannot write {full_disk / 'a.json'}", "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == ["ballast"]


def test_export_on_a_full_disk(digits_ckpt, full_disk):
    fill(full_disk)
    proc = run_laya("export", digits_ckpt, "--samples", 30, "--out", full_disk / "exp", "-q")
    one_error_line(proc, "cannot write", "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == ["ballast"]


def test_a_checkpoint_that_cannot_be_written_leaves_a_resumable_training(tmp_path, monkeypatch):
    """The disk fills up exactly when the final checkpoint is written (a patched writer)."""
    import laya_cli.training.job
    from laya_cli.runtime.fileio import atomic_path

    def full(ckpt, path):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "m.pt"
    monkeypatch.setattr(laya_cli.training.job, "save_checkpoint", full)
    result = invoke("train", "--out", out, *DIGITS, "-q")
    assert_run_error(result, f"cannot write {out}", "No space left on device", f"kept in {out}.state", "--resume")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt.state"]  # no partial checkpoint, no temp file

    monkeypatch.undo()
    resumed = invoke("train", "--out", out, "--resume", *DIGITS, "-q")
    assert resumed.exit_code == 0, resumed.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
    assert json.loads(invoke("info", out, "--json").stdout)["metrics"]["epochs_run"] == 2


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_written_files_keep_the_umask_mode_not_the_temp_files_0600(tmp_path, digits_ckpt, umask, monkeypatch):
    """Checkpoints, cache entries, exports and JSON are written through a 0600 temp file and renamed:
    they must end with the mode the umask gives (0644 under 022), as any other program's files."""
    cache = tmp_path / "cache"
    previous = os.umask(umask)
    try:
        ckpt = tmp_path / "m.pt"
        result = invoke("train", "--out", ckpt, "-q", *DIGITS)
        assert result.exit_code == 0, result.output
        monkeypatch.setenv("LAYA_CACHE_DIR", str(cache))
        result = invoke("audit", digits_ckpt, "--compare", "", "--samples", 30, "--json", tmp_path / "a.json", "-q")
        assert result.exit_code == 0, result.output
        result = invoke("export", digits_ckpt, "--out", tmp_path / "export", "--no-plots", "--samples", 30, "-q")
        assert result.exit_code == 0, result.output
    finally:
        os.umask(previous)
    files = [ckpt, tmp_path / "a.json", *(tmp_path / "export").iterdir()]
    import torch

    from laya_cli.features.cache import FeatureCache
    from laya_cli.features.extraction import LayerFeatures

    previous = os.umask(umask)
    try:
        assert FeatureCache(cache).save("k", LayerFeatures([torch.zeros(2, 3)], torch.zeros(2, dtype=torch.long)))
    finally:
        os.umask(previous)
    files += list(cache.iterdir())
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o666 & ~umask, f"{f}: {oct(f.stat().st_mode & 0o777)}"
    assert (tmp_path / "export").stat().st_mode & 0o777 == 0o777 & ~umask
