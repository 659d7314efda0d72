"""A training run that fails leaves nothing a rerun stumbles on (issue 48): a diverged run (NaN or Inf loss) is
said to be one, naming the training options that can cause it — not blamed on the backbone's features — and
leaves no resumable ``.state`` beside ``--out``; other failures keep only a state that was there before them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers import assert_run_error, invoke

from laya_cli.runtime.errors import LayaError
from laya_cli.training.job import _discard_failed_state
from laya_cli.training.loop import NonFiniteLoss, StateKept


@pytest.mark.parametrize("route", [[], ["--frozen"]], ids=["end-to-end", "frozen"])
def test_a_diverged_run_says_so_and_leaves_no_state(tmp_path, route):
    out = tmp_path / "m.pt"
    r = invoke("train", "--dataset", "digits", "--epochs", "2", "--lr", "1e20", "--out", out, "--quiet", *route)
    assert_run_error(r, "training diverged", "NaN or Inf", "--lr 1e+20", "no training state is kept")
    assert "produced NaN" not in r.output  # the backbone is not blamed for what the options did
    assert not out.exists() and not (tmp_path / "m.pt.state").exists()
    again = invoke("train", "--dataset", "digits", "--epochs", "1", "--out", out, "--quiet", *route)
    assert again.exit_code == 0, again.output  # no --restart needed: nothing was left behind
    assert out.is_file() and not (tmp_path / "m.pt.state").exists()


@pytest.mark.parametrize(
    "error, resumed, kept",
    [
        (NonFiniteLoss("diverged"), False, False),
        (NonFiniteLoss("diverged"), True, False),  # resuming would replay the divergence
        (LayaError("bad image"), False, False),  # this run's own state
        (LayaError("bad image"), True, True),  # the state --resume continued: the user's earlier epochs
        (StateKept("disk full; the state of epoch 3 is kept there"), False, True),
    ],
)
def test_which_failures_keep_the_state(tmp_path, error, resumed, kept):
    state = tmp_path / "m.pt.state"
    state.write_bytes(b"state")
    _discard_failed_state(SimpleNamespace(state_path=state), error, resumed)
    assert state.exists() == kept
