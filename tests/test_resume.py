"""Interruptions: a killed training run resumes to exactly the weights of an uninterrupted one."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import train_digits

from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.runtime.declare import evolve
from laya_cli.training.job import train

# Long enough (30 epochs) that the signal lands mid-training even on an idle machine.
# The mlp's own defaults, its network alignment target included (the reference below trains with align=None too).
ARGS = ["--epochs", "30", "--patience", "30", "--seed", "5", "--d-star", "16", "--score-hidden", "16"]


def laya(*args, **kw):
    env = {**os.environ, "LAYA_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "laya_cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,
    )


def assert_same_weights(a: dict, b: dict):
    for part in ("head", "backbone"):
        wa, wb = a[part]["weights"], b[part]["weights"]
        assert wa.keys() == wb.keys()
        for k in wa:
            assert torch.equal(wa[k], wb[k]), f"{part}.{k} differs"


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)], ids=["SIGTERM", "SIGINT"]
)
def test_killed_run_resumes_to_the_uninterrupted_weights(tmp_path, sig):
    out = tmp_path / "m.pt"
    state = tmp_path / "m.pt.state"
    proc = laya("train", "--out", out, *ARGS)
    deadline = time.time() + 120
    while not state.exists() and time.time() < deadline:  # wait for the first finished epoch
        time.sleep(0.05)
    assert state.exists(), proc.communicate()[1]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    if proc.returncode in (0, -sig):  # finished (or left fit()) before the signal arrived
        pytest.skip("training finished before the signal arrived")
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    assert not out.exists()  # no half-written checkpoint

    resumed = laya("train", "--out", out, "--resume", *ARGS)
    stdout, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert not state.exists()  # cleaned up after success

    a = read_checkpoint(out)
    b = read_checkpoint(train_digits(tmp_path / "ref.pt", epochs=30, seed=5, d_star=16, score_hidden=16, align=None))
    assert_same_weights(a, b)
    assert a["metrics"] == b["metrics"]
    c = read_checkpoint(train_digits(tmp_path / "c.pt", epochs=3, seed=10))
    assert any(not torch.equal(v, c["head"]["weights"][k]) for k, v in a["head"]["weights"].items())


def test_resume_without_state_is_a_user_error(tmp_path):
    proc = laya("train", "--out", tmp_path / "m.pt", "--resume", *ARGS)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "no saved training state" in err


def _interrupted_state(req, with_options: bool = True):
    """Leave ``req``'s state beside its --out as an interrupted run does (after epoch 1)."""
    from laya_cli.data.datasets import load_dataset
    from laya_cli.model.heads import build_head
    from laya_cli.model.laya_model import EndToEnd
    from laya_cli.training.defaults import resolved_request
    from laya_cli.training.job import prepare_backbone
    from laya_cli.training.loop import fit

    req = resolved_request(req)  # as laya train resolves it before the state's fingerprint

    def stop(record):  # interrupt right after the first epoch's state is written
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        data = load_dataset(req.data)
        backbone = prepare_backbone(req, data)
        head = build_head(req.head, [512, 256, 128], 10, req.head_config)
        model = EndToEnd(backbone, head)
        fit(
            model,
            ([data.train.images], data.train.labels),
            ([data.val.images], data.val.labels),
            req.train,
            stop,
            req.state_path,
            False,
            req.fingerprint(),
            options=req.recorded_options() if with_options else None,
        )
    assert req.state_path.exists()


def _request(tmp_path, **train):
    from laya_cli.data.settings import DataSettings
    from laya_cli.model.settings import HeadSettings
    from laya_cli.training.settings import TrainingSettings, TrainJobSettings

    return TrainJobSettings(
        data=DataSettings("digits", seed=0),
        train=TrainingSettings(
            **{"epochs": 3, "seed": 0, "align": 0.0, **train}
        ),  # the plain run _interrupted_state fits
        head_config=HeadSettings(d_star=16, score_hidden=16),
        out=str(tmp_path / "m.pt"),
    )


def test_resume_with_other_options_is_refused_naming_the_option_and_both_values(tmp_path):
    from laya_cli.runtime.errors import LayaError

    _interrupted_state(_request(tmp_path))
    other = evolve(_request(tmp_path, lr=1e-3), resume=True)  # settings are frozen: a new request
    with pytest.raises(LayaError, match=r"other options \(train\.lr 0\.0003 -> 0\.001\).*--restart"):
        train(other)


def test_resume_of_an_older_state_without_options_still_refuses(tmp_path):
    """States written before the options were stored carry only the fingerprint: still read, still checked."""
    from laya_cli.runtime.errors import LayaError

    _interrupted_state(_request(tmp_path), with_options=False)
    other = evolve(_request(tmp_path, lr=1e-3), resume=True)  # settings are frozen: a new request
    with pytest.raises(LayaError, match=r"written by a run with other options; use the same options"):
        train(other)
    same = evolve(_request(tmp_path), resume=True)
    assert train(same)["metrics"]["epochs_run"] == 3


def test_rerun_without_resume_refuses_to_overwrite_the_state_and_restart_starts_over(tmp_path):
    from helpers import assert_user_error, invoke

    req = _request(tmp_path)
    _interrupted_state(req)
    before = req.state_path.read_bytes()
    args = ["train", "--out", req.out, "--epochs", "3", "--seed", "0", "--d-star", "16", "--score-hidden", "16", "-q"]
    assert_user_error(
        invoke(*args), f"{req.state_path} holds an interrupted training run (after epoch 1)", "--resume", "--restart"
    )
    assert req.state_path.read_bytes() == before  # untouched
    assert_user_error(invoke(*args, "--resume", "--restart"), "exclude each other")
    result = invoke(*args, "--restart")
    assert result.exit_code == 0, result.output
    assert not req.state_path.exists() and (tmp_path / "m.pt").exists()
    assert read_checkpoint(tmp_path / "m.pt")["metrics"]["epochs_run"] == 3  # from epoch 1, not resumed


def test_same_seed_gives_identical_checkpoints_but_for_wall_clock(tmp_path):
    a = read_checkpoint(train_digits(tmp_path / "a.pt", epochs=3, seed=9))
    b = read_checkpoint(train_digits(tmp_path / "b.pt", epochs=3, seed=9))
    assert_same_weights(a, b)
    for ra, rb in zip(a["reference"], b["reference"]):
        assert torch.equal(ra, rb)
    strip = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]
    assert strip(a["history"]) == strip(b["history"])
    assert a["metrics"] == b["metrics"]
