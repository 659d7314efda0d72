"""Unix manners (docs/usage.md#pipes): a reader that closes early ends laya quietly with laya's own exit status,
and output to a pipe or a file is never wrapped. Real subprocesses: a pipe is what is tested."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from helpers import child_env


def laya_closed_early(*args) -> subprocess.CompletedProcess:
    """``laya ARGS`` whose stdout is a pipe closed before laya writes to it; stderr captured."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "laya_cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    proc.stdout.close()  # the reader is gone: every write to stdout meets a broken pipe
    err = proc.stderr.read().decode()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=300), "", err)


def pipefail(command: str) -> subprocess.CompletedProcess:
    """``command`` in bash under ``set -o pipefail``, ``laya`` standing for this checkout's laya."""
    laya = f"{shlex.quote(sys.executable)} -m laya_cli"
    script = "set -o pipefail\n" + command.replace("laya ", laya + " ", 1)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=child_env(), timeout=300)


@pytest.mark.parametrize("args", [("--help",), ("train", "--help")])
def test_help_to_a_closed_reader_ends_quietly_with_0(args):
    done = laya_closed_early(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr and "Broken pipe" not in done.stderr


def test_audit_to_a_closed_reader_keeps_the_audits_own_status(digits_ckpt):
    done = laya_closed_early("audit", digits_ckpt, "--samples", 60)
    assert done.returncode == 0, done.stderr  # not rich's exit 1, which laya reserves for a failed gate
    assert "Traceback" not in done.stderr and "error" not in done.stderr.replace("rror:", "")
    failed = laya_closed_early("audit", digits_ckpt, "--samples", 60, "--fail-under", "faithfulness=1.01")
    assert failed.returncode == 1, failed.stderr  # the gate still decides, pipe or no pipe
    assert "fail-under:" in failed.stderr


def test_audit_piped_to_head_under_pipefail_passes(digits_ckpt):
    done = pipefail(f"laya audit {shlex.quote(str(digits_ckpt))} --samples 60 | head -2")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    assert "Traceback" not in done.stderr


def test_piped_lines_are_not_wrapped(tmp_path):
    """Lines longer than 80 columns stay whole in a pipe: the epoch line keeps its ``*best`` mark, the last line
    its checkpoint path."""
    out = tmp_path / ("a-checkpoint-with-a-long-name-" * 3 + ".pt")
    done = pipefail(f"laya train --dataset digits --epochs 1 --out {shlex.quote(str(out))} --device cpu 2>&1 | cat")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(len(line) > 80 for line in lines), lines  # long lines exist, so wrapping would have shown
    assert not any(line.strip() == "*best" for line in lines), lines
    assert any(line.startswith("epoch") and line.endswith("*best") for line in lines), lines
    assert any(line.startswith("test accuracy") and line.endswith(str(out)) for line in lines), lines
