"""``laya train --task lm --exit-aware W`` (training/exit_aware.py): the head trained truncated at random depths is
the truncated head ``laya depth``'s exit reads, the run is recorded and deterministic, bad values are one line."""

from __future__ import annotations

import json

import pytest
import torch

from laya_cli.auditing.lm import token_data
from laya_cli.depthing.lm_exit import truncated_laya
from laya_cli.features.lm_positions import token_states
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.lm_heads import lm_from_checkpoint, truncated_states
from laya_cli.runtime.errors import LayaError
from laya_cli.training.exit_aware import truncation_depths
from laya_cli.training.lm import ReferenceSum, train_lm
from tests.helpers import assert_user_error, invoke, make_lm_folder, sentences, small_lm_request

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lm"), sentences(150), 110)


@pytest.fixture(scope="module")
def trained(lm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("exit") / "lm.pt"
    return train_lm(small_lm_request(lm_dir, out, exit_aware=1.0)), out


def test_the_truncated_input_is_the_one_laya_depth_reads(trained):
    """The head on ``truncated_states`` at each position's depth gives ``truncated_laya``'s logits at that depth
    (r̄ above k, α masked above k and renormalised), several depths in one batch."""
    _, path = trained
    model = lm_from_checkpoint(read_checkpoint(path))
    hs, _ = token_states(model.lm, token_data(model, None, 30, 2).blocks[0])
    depths = truncation_depths(len(hs), hs.shape[1], torch.Generator().manual_seed(5))
    assert len(depths.unique()) > 1 and depths.min() >= 1 and depths.max() < hs.shape[1]
    seen, keep = truncated_states(hs, torch.stack(list(model.reference)), depths)
    with torch.no_grad():
        got = model.laya(seen, keep)[0]
    for k in depths.unique().tolist():
        rows = depths == k
        torch.testing.assert_close(got[rows], truncated_laya(model, hs[rows], k)[0], atol=1e-5, rtol=1e-5)


def test_the_reference_it_truncates_with_is_the_one_the_checkpoint_stores(lm_dir):
    """r̄ while summing is the mean so far; once summed, the stored one (``ReferenceSum.means``)."""
    from laya_cli.training.exit_aware import ExitAware

    summed = ReferenceSum(10)
    aware = ExitAware(1.0, summed, seed=0)
    first = torch.randn(6, 3, 4)
    summed.add(first)
    torch.testing.assert_close(aware.reference("cpu"), first.mean(0))
    second = torch.randn(6, 3, 4)
    summed.add(second)
    summed.add(torch.randn(6, 3, 4))  # past the 10 positions: not summed
    want = torch.cat([first, second]).mean(0)
    torch.testing.assert_close(aware.reference("cpu"), want)
    torch.testing.assert_close(torch.stack(summed.means()), want)


def test_the_command_line_trains_with_it_by_default_and_0_turns_it_off(lm_dir, tmp_path):
    """The LM default (``backbones.defaults.KIND_DEFAULTS``' lm entry, with the network term), recorded resolved."""
    base = ["train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}",
            "--block-size", "16", "--eval-tokens", "200", "--lens", "none", "--quiet"]  # fmt: skip
    for extra, want in (((), 1.0), (("--exit-aware", "0"), None)):
        out = tmp_path / f"{len(extra)}.pt"
        assert invoke(*base, *extra, "--out", out).exit_code == 0
        config = json.loads(invoke("info", out, "--json").stdout)["train_config"]
        assert config.get("exit_aware") == want
        assert config["align"] == 1.0 and config["align_target"] == "network"  # the LM's default term


def test_a_run_with_it_records_it_trains_differently_and_replays(trained, lm_dir, tmp_path):
    ckpt, _ = trained
    assert ckpt["train_config"]["exit_aware"] == 1.0
    plain = train_lm(small_lm_request(lm_dir, tmp_path / "plain.pt"))
    assert "exit_aware" not in plain["train_config"]  # off: recorded as before the option existed
    assert ckpt["history"][0]["loss"] > plain["history"][0]["loss"]  # the truncated objective is in the loss
    again = train_lm(small_lm_request(lm_dir, tmp_path / "again.pt", exit_aware=1.0))
    for name, w in ckpt["head"]["weights"].items():
        assert torch.equal(w, again["head"]["weights"][name]), name


def test_the_cli_trains_with_it_beside_the_network_term(lm_dir, tmp_path):
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}",
               "--dataset", f"text:{lm_dir / 'corpus'}", "--block-size", "16", "--eval-tokens", "200", "--lens",
               "none", "--align-target", "network", "--exit-aware", "0.5", "--out", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    config = json.loads(invoke("info", out, "--json").stdout)["train_config"]
    assert config["exit_aware"] == 0.5 and config["align_target"] == "network"
    assert invoke("depth", out, "--samples", "200").exit_code in (0, 1)  # 1: laya's own exit targets missed


def test_one_layer_has_nothing_to_truncate_and_trains_without_it(lm_dir, tmp_path):
    """--layers naming the last block alone: the default --exit-aware has no depth to draw, so it is off (and
    recorded off); the run does not fail."""
    out = tmp_path / "one.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}",
               "--dataset", f"text:{lm_dir / 'corpus'}", "--block-size", "16", "--eval-tokens", "200",
               "--lens", "none", "--layers", "h.3", "--out", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "exit_aware" not in json.loads(invoke("info", out, "--json").stdout)["train_config"]


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_bad_values_are_one_line_and_write_nothing(lm_dir, tmp_path, value):
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}",
               "--dataset", f"text:{lm_dir / 'corpus'}", "--exit-aware", value, "--out", out)  # fmt: skip
    assert_user_error(r, "--exit-aware")
    assert not out.exists()


def test_the_depths_are_the_same_positions_whatever_the_ranks(monkeypatch):
    """Each rank's depths are its rows of the global batch's (one process's), so torchrun trains the same head."""
    from laya_cli.runtime.distributed import shard_bounds
    from laya_cli.training import exit_aware

    def drawn(rank: int, world: int) -> torch.Tensor:
        monkeypatch.setattr(exit_aware, "shard_bounds", lambda n: shard_bounds(n, rank_=rank, world=world))
        aware = exit_aware.ExitAware(1.0, ReferenceSum(10), seed=4)
        aware.start_epoch(2)
        return aware.depths(5, 7, 6)  # 5 blocks of 7 positions, 6 layers

    whole = drawn(0, 1)
    assert torch.equal(torch.cat([drawn(0, 2), drawn(1, 2)]), whole)
    assert len(whole) == 35 and whole.min() >= 1 and whole.max() <= 5 and len(whole.unique()) > 1


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5])
def test_the_python_api_checks_the_same(lm_dir, tmp_path, value):
    with pytest.raises(LayaError, match="--exit-aware"):
        train_lm(small_lm_request(lm_dir, tmp_path / "m.pt", exit_aware=value))
    assert not (tmp_path / "m.pt").exists()
