"""``laya train --task lm`` under torchrun (2 processes, gloo, CPU): every rank runs the frozen model on its share of
each global batch of blocks; the heads' gradients, the held-out sums and r̄ are summed over the ranks, so the
checkpoint is the one-process checkpoint up to float summation order (one file, written by rank 0)."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_close_tree, child_env, make_lm_folder, run_laya, sentences

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_torchrun_training_of_a_language_model_matches_one_process(tmp_path):
    lm = make_lm_folder(tmp_path / "lm", sentences(300), 250)
    env = child_env(OMP_NUM_THREADS="1", LAYA_DIST_TIMEOUT="120", PYTHONUNBUFFERED="1")
    args = [
        "train",
        "--task",
        "lm",
        "--backbone",
        f"hf:{lm / 'model'}",
        "--dataset",
        f"text:{lm / 'corpus'}",
        "--epochs",
        "1",
        "--block-size",
        "16",
        "--batch-size",
        "5",
        "--eval-tokens",
        "400",
        "--device",
        "cpu",
        "--align",
        "0",
    ]  # fmt: skip  (the term draws each rank's own block: not equal)
    outs = {}
    for procs in (1, 2):
        (tmp_path / str(procs)).mkdir()
        r = run_laya(*args, "--out", tmp_path / str(procs) / "lm.pt", env=env, timeout=600, procs=procs)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        outs[procs] = r.stdout
    assert sorted(p.name for p in (tmp_path / "2").iterdir()) == ["lm.pt"]  # one file, no temp left behind
    a, b = (torch.load(tmp_path / str(p) / "lm.pt", weights_only=True) for p in (1, 2))
    for part in ("head", "tuned_lens"):
        for k, w in a[part]["weights"].items():
            torch.testing.assert_close(b[part]["weights"][k], w, rtol=0, atol=1e-5, msg=k)
    assert_close_tree(a["metrics"], b["metrics"], 1e-5)
    for ra, rb in zip(a["reference"], b["reference"]):
        torch.testing.assert_close(rb, ra, rtol=0, atol=1e-6)
    assert outs[2].count("held-out laya") == 1  # printed once, by rank 0


def test_torchrun_trains_with_the_default_term_and_records_it(tmp_path):
    """The LM default (--align 1 --align-target network, --exit-aware 1) under torchrun: each rank draws its own
    block for the term, so it is not the one-process head; it must run and be recorded."""
    lm = make_lm_folder(tmp_path / "lm", sentences(200), 160)
    env = child_env(OMP_NUM_THREADS="1", LAYA_DIST_TIMEOUT="120", PYTHONUNBUFFERED="1")
    r = run_laya("train", "--task", "lm", "--backbone", f"hf:{lm / 'model'}", "--dataset", f"text:{lm / 'corpus'}",
                 "--block-size", "16", "--batch-size", "5", "--eval-tokens", "300", "--lens", "none",
                 "--device", "cpu", "--out", tmp_path / "lm.pt", env=env, timeout=600, procs=2)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    config = torch.load(tmp_path / "lm.pt", weights_only=True)["train_config"]
    assert (config["align"], config["align_target"], config["exit_aware"]) == (1.0, "network", 1.0)


def test_torchrun_trains_the_heads_own_term_with_a_rank_that_holds_no_block(tmp_path):
    """--align-target both without --exit-aware under torchrun, one block a batch: the second rank never holds a
    block, yet it must join the all-reduce of the running r̄ that the head's term reads (a deadlock otherwise)."""
    lm = make_lm_folder(tmp_path / "lm", sentences(60), 40)
    env = child_env(OMP_NUM_THREADS="1", LAYA_DIST_TIMEOUT="120", PYTHONUNBUFFERED="1")
    r = run_laya("train", "--task", "lm", "--backbone", f"hf:{lm / 'model'}", "--dataset", f"text:{lm / 'corpus'}",
                 "--block-size", "16", "--batch-size", "1", "--eval-tokens", "300", "--lens", "none",
                 "--align-target", "both", "--exit-aware", "0",
                 "--device", "cpu", "--out", tmp_path / "lm.pt", env=env, timeout=600, procs=2)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    config = torch.load(tmp_path / "lm.pt", weights_only=True)["train_config"]
    assert (config["align"], config["align_target"]) == (1.0, "both") and "exit_aware" not in config
