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
    assert len(lines) == 4, lines  # one per item (interval 0) but the last, which the closing line says
    assert lines[0].startswith("epoch 1: 1/4 (25 %), ") and lines[0].endswith(" left")
    assert lines[-1].startswith("epoch 1: 4/4 (100 %), ") and " done in " in lines[-1]


def test_a_loop_shorter_than_the_interval_prints_nothing(capsys):
    with progress.enabled(True):
        assert list(progress.log_lines(range(3), "audit", total=3, interval=3600)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_the_text_without_a_total_and_for_slow_items():
    assert progress.progress_text("epoch 2", 120, None, 60.0) == "epoch 2: 120, 2.0/s"  # no unit given
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
    assert lines and ("batches/s" in lines[0] or "s per batch" in lines[0]) and "%" in lines[0], r.stderr  # plain
    assert any(" done in " in line for line in lines)


def test_every_line_names_its_unit_and_what_one_holds(capsys):
    """Issue 64: 'epoch 2: 8, 4.6 s each' (8 of what?)."""
    assert progress.progress_text("epoch 2", 8, None, 36.8, unit="batch", of="of 8 blocks of 64 tokens") == (
        "epoch 2: 8 batches of 8 blocks of 64 tokens, 4.6 s per batch"
    )
    assert (
        progress.progress_text("audit", 1, 10, 30.0, unit="batch")
        == "audit: 1/10 batches (10 %), 30.0 s per batch, 4m 30s left"
    )
    assert progress.progress_text("x", 120, None, 60.0, unit="batch") == "x: 120 batches, 2.0 batches/s"
    with progress.enabled(True):
        list(progress.log_lines(range(2), "epoch 1", total=2, interval=0, unit="batch", of="of 32 samples"))
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("epoch 1: 1/2 batches of 32 samples (50 %), ") and lines[-1].endswith(lines[-1])


def test_progress_moves_inside_one_long_item_with_the_time_left_from_the_first_seconds(capsys, monkeypatch):
    """Issue 64: a network-scope audit printed its first line after 31 minutes (progress was per batch). Work inside
    an item reports its share (``within``, ``phase``): the line comes early, counts fractions of a batch, and gives the
    time left from them."""
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])

    def batch():
        with progress.phase(0.25):  # e.g. the patched passes: a quarter of the batch
            for _ in progress.within(range(5)):
                clock[0] += 1.0
        with progress.phase(0.75):
            for _ in progress.within(range(3)):  # e.g. IG, layer by layer
                clock[0] += 5.0

    with progress.enabled(True):
        for _ in progress.log_lines(range(4), "auditing (network scope)", total=4, interval=30, unit="batch"):
            batch()
    lines = capsys.readouterr().err.strip().splitlines()
    first = lines[0]
    assert first.startswith("auditing (network scope): 0.") and "/4 batches" in first, lines  # inside batch 1
    assert first.endswith(" left") and float(first.split(": ")[1].split("/")[0]) < 1
    assert clock[0] - 4 * 20.0 == 0 and lines[-1].endswith("done in 1m 20s")
    assert len(lines) >= 3  # the first after ~10 s, then every 30 s, then the closing line


def test_inner_progress_outside_a_tracked_loop_is_a_plain_loop():
    assert list(progress.within(range(3))) == [0, 1, 2]
    with progress.phase(0.5):
        pass


def test_a_callback_moves_the_progress_pass_by_pass(capsys, monkeypatch):
    """``ticks``: Captum's passes over IG's steps (internal batches) call back; each moves the line on by 1/n."""
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    with progress.enabled(True):
        for _ in progress.log_lines(range(1), "ig", total=1, interval=0, unit="batch"):
            with progress.ticks(4) as tick:
                for _ in range(6):  # more calls than passes (Captum's convergence check): capped at the share
                    clock[0] += 1.0
                    tick()
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(" batch")[0] for line in lines[:4]] == ["ig: 0.2/1", "ig: 0.5/1", "ig: 0.8/1", "ig: 1/1"]
    with progress.ticks(3) as tick:  # nothing tracked: a no-op
        tick()
