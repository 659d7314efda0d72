"""What laya's tests (and a user's tests of a laya integration) need: the command line run in-process
(Typer's CliRunner) or as a real subprocess (under torchrun too), the one-line-error assertion, and the
makers of small inputs (``synthetic.py``'s, and seeded heads, backbones and models built from them). No
pytest import, no side effects on import.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from benchmarks.synthetic import (
    make_causal_lm,
    make_collapsed_head,
    make_head_and_features,
    make_image_folder,
    make_lm_folder,
    sentences,
    train_digits,
)

__all__ = [
    "make_image_folder",
    "make_causal_lm",
    "make_lm_folder",
    "sentences",
    "make_head_and_features",
    "make_collapsed_head",
    "make_attribution_inputs",
    "head_only_model",
    "make_backbone",
    "train_digits",
    "invoke",
    "run_laya",
    "child_env",
    "assert_user_error",
    "fill",
    "assert_close_tree",
]

# The folder that holds this laya_cli package: first on a child process's import path (``child_env``).
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def invoke(*args, **kwargs):
    """``laya ARGS…`` in this process (Typer's CliRunner); the result has exit_code, stdout, output."""
    from typer.testing import CliRunner

    from laya_cli.cli.group import app

    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def run_laya(*args, cwd: str | Path | None = None, env: dict | None = None, timeout: float = 300, procs: int = 1):
    """``python -m laya_cli ARGS…`` as a real subprocess, offline; a CompletedProcess with text output.

    ``procs`` > 1: under ``torchrun --standalone --nproc-per-node PROCS`` (one process per rank).
    """
    env = {**os.environ, "LAYA_OFFLINE": "1", **(env or {})}
    launcher = [sys.executable]
    if procs > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}"]
    return subprocess.run(
        [*launcher, "-m", "laya_cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child Python that must import this very laya_cli whatever its
    working directory (the folder above the package first on PYTHONPATH), offline, ``extra`` on top."""
    path = os.pathsep.join([str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "LAYA_OFFLINE": "1", "PYTHONPATH": path, **extra}


def make_attribution_inputs(
    kind: str = "laya", seed: int = 0, batch: int = 7, dims=(12, 8, 6, 10), num_classes: int = 5
):
    """``make_head_and_features`` and the class the head predicts for each sample, the target an
    attribution method explains: (head, feats, ref, target)."""
    import torch

    head, feats, ref = make_head_and_features(kind, seed, batch, dims, num_classes)
    with torch.no_grad():
        target = head(feats).logits.argmax(-1)
    return head, feats, ref, target


def head_only_model(head, reference, num_classes: int) -> SimpleNamespace:
    """A bare head and its ablation reference as the model an audit takes (``auditing.head_scope.run_audit``),
    with layers named l0, l1, … and classes c0, c1, …"""
    return SimpleNamespace(
        head=head,
        reference=reference,
        layer_names=[f"l{i}" for i in range(len(reference))],
        classes=[f"c{i}" for i in range(num_classes)],
    )


def make_backbone(name: str, side: int, seed: int = 0):
    """A tapped backbone ``name``, randomly initialised after ``torch.manual_seed(seed)``, in eval mode, for
    ``side``×``side`` images: the built-ins (mlp, cnn) on one channel at that size, hub models on three
    channels resized to input size ``side``."""
    import torch

    from laya_cli.backbones.build import BackboneSpec, build_backbone

    torch.manual_seed(seed)
    builtin = name in ("mlp", "cnn")
    spec = BackboneSpec(
        name, in_channels=1 if builtin else 3, image_size=(side, side), input_size=None if builtin else side
    )
    return build_backbone(spec).eval()


def fill(folder: Path, leave: int = 0) -> None:
    """Use every free block of ``folder``'s file system but ``leave`` bytes, so that a write past them fails with
    ENOSPC (creating empty files still works)."""
    stat = os.statvfs(folder)
    with open(Path(folder) / "ballast", "wb", buffering=0) as f:
        try:
            f.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
            while not leave:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def assert_user_error(result, *fragments: str) -> None:
    """A CliRunner result that is exactly one 'error:' line, exit 2, no traceback, naming ``fragments``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    text = " ".join(result.output.split())
    for fragment in fragments:
        assert fragment in text, text


def assert_run_error(result, *fragments: str) -> None:
    """A run that failed after it started: exit 2, no traceback, its progress and warnings, then exactly one
    'error:' line, the last, naming ``fragments``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert lines[-1].startswith("error:"), result.output
    assert sum(line.startswith("error:") for line in lines) == 1, result.output
    text = " ".join(lines[-1].split())
    for fragment in fragments:
        assert fragment in text, text


def assert_close_tree(a, b, tol: float, path: str = "") -> None:
    """Two JSON-like documents (dicts, lists, numbers, strings) are equal, floats to within ``tol``."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_close_tree(a[k], b[k], tol, f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_tree(x, y, tol, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= tol or (a != a and b != b), f"{path}: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def lm_request(backbone: str, dataset: str, out, **kw):
    """A ``--task lm`` ``TrainJobSettings`` from option names, as ``laya train`` takes them, with a test's small
    defaults: one epoch of batches of 16 at lr 1e-3, no alignment or exit-aware term (``kw`` overrides)."""
    from laya_cli.runtime.declare import build
    from laya_cli.training.settings import TrainJobSettings

    base = {"batch_size": 16, "epochs": 1, "lr": 1e-3, "align": 0.0, "exit_aware": 0.0}
    return build(TrainJobSettings, base | kw | {"task": "lm", "backbone": backbone, "dataset": dataset}, out=str(out))


def small_lm_request(lm_dir: Path, out: Path, **kw):
    """``lm_request`` on ``make_lm_folder``'s model and corpus, sized for a test (``kw`` overrides)."""
    base = dict(block_size=16, batch_size=8, epochs=1, lr=3e-3, eval_tokens=300, lens="none", seed=3)
    return lm_request(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", out, **(base | kw))
