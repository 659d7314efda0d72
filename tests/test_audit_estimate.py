"""The audit near its floor: the network scope's default methods, and the line said before a long network-scope audit
(auditing/estimate.py)."""

from __future__ import annotations

import pytest

from laya_cli.auditing.estimate import SAY_ABOVE_S, eta_line, network_passes
from laya_cli.auditing.names import parse_methods
from laya_cli.auditing.settings import compare_for


def test_each_scope_has_its_default_methods_and_a_named_list_wins():
    assert parse_methods(compare_for(None, "head")) == ["laya", "ig", "gradxact", "random"]
    assert parse_methods(compare_for(None, "network")) == ["laya", "gradxact", "atp", "random"]
    assert parse_methods(compare_for(None, "both")) == ["laya", "ig", "gradxact", "atp", "random"]
    assert parse_methods(compare_for("ig", "network")) == ["laya", "ig", "random"]
    assert parse_methods(compare_for("", "network")) == ["laya", "random"]


def test_network_passes_are_the_floor_plus_what_each_method_adds():
    floor = network_passes(["laya", "random"], 4, prefix=True)
    assert floor == 1 + (3 + 2 + 1 + 0) / 4  # the taps, then each removed layer's suffix
    assert network_passes(["laya", "random"], 4, prefix=False) == 1 + 4  # full passes without a chain
    assert network_passes(["gradxact", "atp"], 4, prefix=True) == floor + 6
    ig = network_passes(["ig"], 4, prefix=True) - floor
    assert ig == 3 * 16 * (6 / 4 + 1)  # 16 steps of each suffix, forward and backward


def test_a_long_audit_says_how_long_and_how_to_make_it_cheaper():
    assert eta_line(SAY_ABOVE_S - 1, 100, 10.0, 0.0) is None
    line = eta_line(3600.0, 1000, 90.0, 80.0)
    assert line.startswith("note: this network-scope audit will take about 60 min (1,000 samples × ~90 forwards")
    assert "--samples 50 " in line and "--compare gradxact,atp" in line and "89%" in line and "--scope head" in line
    assert "--compare" not in eta_line(3600.0, 1000, 10.0, 0.0)  # no IG: nothing to drop
    assert "2.0 h" in eta_line(7200.0, 1000, 10.0, 0.0)


@pytest.mark.slow  # 6 min on 2 cores shared with three other jobs (the default audits' bootstrap and randomisation)
def test_gpu_benchmark_quick_floor_case_runs_on_the_cpu(monkeypatch, capsys):
    """``python -m benchmarks.gpu --quick --case floor`` without CUDA: the audit-floor case's code path on the CPU at
    tiny sizes (what the first GPU run will execute), its table printed with the goal beside each audit."""
    import torch

    from benchmarks import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = gpu.main(["--quick", "--case", "floor"])["floor"]
    assert r["device"] == "cpu" and r["taps"] == 5  # resnet18's residual blocks
    phases = r["phases"]
    assert set(phases) == {"forward", "head floor", "network floor", "head audit (default: ig,gradxact)",
                           "network audit (default: gradxact,atp)", "network audit (asked: ig,gradxact)"}  # fmt: skip
    assert all(p["seconds"] > 0 for p in phases.values())
    assert phases["network audit (default: gradxact,atp)"]["over_floor"] > 0
    assert sum("goal ≤ 1.5×" in line for line in capsys.readouterr().out.splitlines()) == 3


def test_no_time_left_from_a_sliver_of_the_first_batch_and_warm_up_left_out():
    """Issue 71: '0.0/1 batch … 29m 15s left' for an audit done in 4 min 53 s; '1.3/11 batches … 1m 19s left' for an
    epoch done in 24 s (its first batch carried the warm-up)."""
    from laya_cli.runtime.progress import progress_text, time_left

    assert time_left(0.04, 1, 70.0) is None  # 4 % of the only batch: too little to extrapolate from
    assert "left" not in progress_text("auditing", 0.04, 1, 70.0, unit="batch")
    assert time_left(0.5, 1, 60.0) == 60.0  # half of it: the pace so far
    # the first batch took 8 s (warm-up), the next 0.3 batch 0.6 s: 2 s a batch from here, not 6.2
    assert time_left(1.3, 11, 8.6, warm=(1.0, 8.0)) == pytest.approx(9.7 * 2.0)
