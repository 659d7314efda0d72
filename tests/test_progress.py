"""Progress in logs (issue 48): where stderr is no terminal (a log file, CI, a pipe) a long loop prints a plain line
at a steady interval — items done, the rate, the time left — instead of the rich bar a terminal gets."""

from __future__ import annotations

import pytest
from helpers import run_laya

from laya_cli.runtime import progress
from laya_cli.runtime.errors import LayaError


def test_a_plain_line_every_interval_with_count_rate_and_time_left(capsys):
    with progress.enabled(True):
        got = list(progress.log_lines(range(4), "epoch 1", total=4, interval=0))
    assert got == [0, 1, 2, 3]  # the items themselves, untouched
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 5, lines  # one per item (interval 0), then the closing line
    assert lines[0].startswith("epoch 1: 1/4 (25 %), ") and lines[0].endswith(" left")
    assert lines[-1].startswith("epoch 1: 4/4 (100 %), ") and " done in " in lines[-1]


def test_a_loop_shorter_than_the_interval_prints_nothing(capsys):
    with progress.enabled(True):
        assert list(progress.log_lines(range(3), "audit", total=3, interval=3600)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_the_text_without_a_total_and_for_slow_items():
    assert progress.progress_text("epoch 2", 120, None, 60.0) == "epoch 2: 120, 2.0/s"
    assert progress.progress_text("audit", 3, 10, 30.0) == "audit: 3/10 (30 %), 10.0 s each, 1m 10s left"
    assert progress.progress_text("audit", 10, 10, 3700.0, finished=True).endswith("done in 1h 01m 40s")


@pytest.mark.parametrize("raw", ["soon", "-1", "inf", "nan"])
def test_a_bad_interval_is_one_line(monkeypatch, raw):
    monkeypatch.setenv("LAYA_PROGRESS_INTERVAL", raw)
    with pytest.raises(LayaError, match="LAYA_PROGRESS_INTERVAL must be a number of seconds"):
        progress.log_interval()


def test_training_in_a_log_prints_its_progress_lines(tmp_path):
    r = run_laya("train", "--dataset", "digits", "--epochs", "1", "--out", tmp_path / "m.pt",
                 env={"LAYA_PROGRESS_INTERVAL": "0"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("epoch 1: ")]
    assert lines and "/s" in lines[0] and "%" in lines[0], r.stderr  # stderr is a pipe here: plain lines
    assert any(" done in " in line for line in lines)
