"""What laya's tests (and a user's tests of a laya integration) need: the command line run in-process
(Typer's CliRunner) or as a real subprocess, the one-line-error assertion, and the makers of small
inputs from ``synthetic.py``. No pytest import, no side effects on import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .synthetic import make_head_and_features, make_image_folder, train_digits

__all__ = ["make_image_folder", "make_head_and_features", "train_digits", "invoke", "run_laya", "assert_user_error"]


def invoke(*args, **kwargs):
    """``laya ARGS…`` in this process (Typer's CliRunner); the result has exit_code, stdout, output."""
    from typer.testing import CliRunner

    from .cli.group import app

    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def run_laya(*args, cwd: str | Path | None = None, env: dict | None = None, timeout: float = 300):
    """``python -m laya_cli ARGS…`` as a real subprocess, offline; a CompletedProcess with text output."""
    env = {**os.environ, "LAYA_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "laya_cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def assert_user_error(result, *fragments: str) -> None:
    """A CliRunner result that is exactly one 'error:' line, exit 2, no traceback, naming ``fragments``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    text = " ".join(result.output.split())
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
