"""``laya train --task lm --align λ --align-target network``: α per token fitted to the network-scope effects
(training/lm_alignment.py) — the target checked against the audit's own network scope, the run recorded and
deterministic, the refusals one line."""

from __future__ import annotations

import json

import pytest
import torch

from laya_cli.features.lm_positions import token_states
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.lm_heads import lm_from_checkpoint
from laya_cli.runtime.errors import LayaError
from laya_cli.training import lm_alignment
from laya_cli.training.lm import train_lm
from tests.helpers import assert_user_error, invoke, make_lm_folder, sentences, small_lm_request

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lm"), sentences(150), 110)


@pytest.fixture(scope="module")
def aligned(lm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("aligned") / "lm.pt"
    return train_lm(small_lm_request(lm_dir, out, align=1.0, align_target="network", align_loss="both")), out


def test_the_target_is_the_audits_network_effects_at_the_same_positions(aligned):
    """The training target at sampled positions of a block against ``laya audit --scope network``'s Δ there (its
    own states, its own bypass passes, every position of the block at once)."""
    from laya_cli.auditing.lm import token_data, token_network
    from laya_cli.auditing.settings import AuditSettings

    _, path = aligned
    model = lm_from_checkpoint(read_checkpoint(path))
    data = token_data(model, None, 45, 3)  # 3 blocks of 15 predicted positions
    net = token_network(model, data, ["laya", "atp"], AuditSettings(ci=0.0).validate())
    delta = net.samples["delta"]
    block = torch.cat(data.blocks)
    per_block = block.shape[2] - 1
    for b, positions in ((0, torch.tensor([0, 3, 7, 14])), (2, torch.arange(per_block))):
        x = block[b : b + 1]
        hs, _ = token_states(model.lm, x)
        feats, target, got = lm_alignment.network_target(model.lm.backbone, model.laya, x, hs[positions], positions)
        rows = b * per_block + positions
        assert got.shape == (len(positions), model.lm.num_layers)
        assert torch.equal(target, net.samples["predicted"][rows])
        assert got.abs().max() > 1e-4  # the layers move p_ŷ: the comparison is not of zeros
        torch.testing.assert_close(got, delta[rows], atol=1e-5, rtol=1e-4)


def test_the_head_target_is_the_audits_head_effects_at_the_same_positions(aligned):
    """``--align-target head|both``'s target at sampled positions against ``laya audit --scope head``'s Δ there (the
    checkpoint's r̄, the audit's own leave-one-layer-out passes over every position)."""
    from laya_cli.auditing.lm import token_audit_job, token_data
    from laya_cli.auditing.settings import AuditSettings

    _, path = aligned
    model = lm_from_checkpoint(read_checkpoint(path))
    data = token_data(model, None, 45, 3)
    audit = token_audit_job(model, ["laya"], AuditSettings(ci=0.0).validate(), "head", None, 45, data=data)
    delta = audit.samples["delta"]
    block = torch.cat(data.blocks)
    per_block = block.shape[2] - 1
    r_bar = torch.stack(list(model.reference))
    for b, positions in ((1, torch.tensor([2, 5, 11])), (0, torch.arange(per_block))):
        hs, _ = token_states(model.lm, block[b : b + 1])
        feats, target, got = lm_alignment.head_target(model.laya, hs[positions], r_bar)
        rows = b * per_block + positions
        assert got.shape == (len(positions), model.lm.num_layers) and len(feats) == model.lm.num_layers
        assert got.abs().max() > 1e-4
        torch.testing.assert_close(got, delta[rows], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("target", ["head", "both"])
def test_the_heads_own_term_trains_is_recorded_and_changes_the_head(aligned, lm_dir, tmp_path, target):
    """``--align-target head`` (the head's effects alone) and ``both`` (added to the network's) train per token,
    deterministically, into another head than the network target's alone, and the record says which."""
    out = tmp_path / "m.pt"
    args = ("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset", f"text:{lm_dir / 'corpus'}",
            "--block-size", "16", "--batch-size", "8", "--epochs", "1", "--lr", "3e-3", "--eval-tokens", "300",
            "--lens", "none", "--seed", "3", "--align-loss", "both", "--exit-aware", "0", "--align-target", target,
            "--quiet")  # fmt: skip
    r = invoke(*args, "--out", out)
    assert r.exit_code == 0, r.output
    ckpt = read_checkpoint(out)
    config = ckpt["train_config"]
    assert (config["align"], config["align_target"], config["align_loss"]) == (1.0, target, "both")
    network, _ = aligned  # the same run with --align-target network
    assert any(not torch.equal(v, network["head"]["weights"][k]) for k, v in ckpt["head"]["weights"].items())
    assert invoke(*args, "--out", tmp_path / "again.pt").exit_code == 0
    again = read_checkpoint(tmp_path / "again.pt")
    for k, v in ckpt["head"]["weights"].items():
        assert torch.equal(v, again["head"]["weights"][k]), k


def test_the_sampled_positions_are_seeded_and_within_one_block():
    draw = lambda seed: lm_alignment.sampled_positions(8, 127, 16, torch.Generator().manual_seed(seed))  # noqa: E731
    (b, p), (b2, p2) = draw(0), draw(0)
    assert b == b2 and torch.equal(p, p2) and 0 <= b < 8
    assert len(p) == 16 and len(set(p.tolist())) == 16 and int(p.max()) < 127
    assert (
        len(lm_alignment.sampled_positions(2, 5, 16, torch.Generator().manual_seed(0))[1]) == 5
    )  # all of a short block


def test_a_run_with_the_term_trains_records_it_and_is_deterministic(aligned, lm_dir, tmp_path):
    ckpt, path = aligned
    config = ckpt["train_config"]
    assert (config["align"], config["align_target"], config["align_loss"], config["align_scope"]) == (
        1.0, "network", "both", "scorer")  # fmt: skip
    again = train_lm(
        small_lm_request(lm_dir, tmp_path / "again.pt", align=1.0, align_target="network", align_loss="both")
    )
    for k, v in ckpt["head"]["weights"].items():
        assert torch.equal(v, again["head"]["weights"][k]), k
    plain = train_lm(small_lm_request(lm_dir, tmp_path / "plain.pt"))
    assert not any(k.startswith("align") for k in plain["train_config"])  # no term: recorded as before
    assert plain["history"][0]["loss"] != ckpt["history"][0]["loss"]  # the term is in the loss
    differs = [not torch.equal(v, plain["head"]["weights"][k]) for k, v in ckpt["head"]["weights"].items()]
    assert any(differs)
    shown = invoke("info", path).output
    assert "--align 1" in shown and "--align-target network" in shown and "--align-loss both" in shown


def test_the_cli_trains_with_the_term_and_a_target_given_alone_is_lambda_1(lm_dir, tmp_path):
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}",
               "--dataset", f"text:{lm_dir / 'corpus'}", "--epochs", "1", "--block-size", "16",
               "--eval-tokens", "200", "--lens", "none",
               "--align-target", "network", "--out", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    config = json.loads(invoke("info", out, "--json").stdout)["train_config"]
    assert config["align"] == 1.0 and config["align_target"] == "network" and config["align_loss"] == "rank"


def test_a_lambda_given_alone_ranks_against_the_network_target(lm_dir, tmp_path):
    """--task lm's default term is the network target's, so --align λ alone is that term at λ."""
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}",
               "--dataset", f"text:{lm_dir / 'corpus'}", "--block-size", "16", "--eval-tokens", "200",
               "--lens", "none", "--align", "0.5", "--out", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    config = json.loads(invoke("info", out, "--json").stdout)["train_config"]
    assert config["align"] == 0.5 and config["align_target"] == "network"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--align", "1", "--align-target", "nowhere"], "--align-target"),
        (["--align", "1", "--align-target", "head", "--align-removal", "bypass"], "--align-target network"),
        (["--align", "-1", "--align-target", "network"], "--align"),
        (["--align", "nan", "--align-target", "network"], "--align"),
        (["--align", "0", "--align-target", "network"], "--align 0"),
        (["--align", "0", "--align-loss", "both"], "--align 1"),
        (["--align", "1", "--align-target", "network", "--align-removal", "mean"], "bypass"),
        (["--align", "1", "--align-target", "network", "--align-loss", "mse"], "--align-loss"),
    ],
)
def test_bad_alignment_options_are_one_line_and_write_nothing(lm_dir, tmp_path, args, fragment):
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}",
               "--dataset", f"text:{lm_dir / 'corpus'}", "--epochs", "1", *args, "--out", out, "--quiet")  # fmt: skip
    assert_user_error(r, fragment)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"align": 1.0, "align_target": "nowhere"}, "--align-target"),
        ({"align": float("nan"), "align_target": "network"}, "--align"),
        ({"align": -0.5, "align_target": "network"}, "--align"),
        ({"align_target": "network"}, "not with --align 0"),
    ],
)
def test_the_python_api_checks_the_same(lm_dir, tmp_path, kw, fragment):
    with pytest.raises(LayaError, match=fragment):
        train_lm(small_lm_request(lm_dir, tmp_path / "m.pt", **kw))
    assert not (tmp_path / "m.pt").exists()


def test_lm_align_variant_names():
    """``benchmarks.lm_align``'s variants are the laya options they name."""
    from benchmarks.lm_align import variant_options

    states = ("--reads", "states")  # pinned too: --task lm's head reads the updates by default
    assert variant_options("default", "1") == ()
    assert variant_options("default+upd", "1") == ("--reads", "updates")
    assert variant_options("plain", "1") == ("--align", "0", "--exit-aware", "0", *states)  # pinned: LMs have defaults
    assert variant_options("plain+trunc", "1", "0.5") == ("--align", "0", "--exit-aware", "0.5", *states)
    rank = ("--align", "3", "--align-target", "network", "--align-loss", "rank", "--exit-aware", "0")
    assert variant_options("rank-3", "1") == (*rank, *states)
    assert variant_options("rank-3+upd", "1") == (*rank, "--reads", "updates")
    assert variant_options("both+trunc", "1")[-4:-2] == ("--exit-aware", "1")
    both = ("--align", "0.3", "--align-target", "both", "--align-loss", "rank", "--exit-aware", "1")
    assert variant_options("rank-0.3+head+trunc", "1") == (*both, *states)
    with pytest.raises(SystemExit, match="variant"):
        variant_options("ranked", "1")


def test_the_held_out_positions_match_their_states_when_the_last_batch_is_short(aligned):
    """More tokens asked for than the held-out text holds, in batches that do not divide its blocks: one position
    per state (``laya bench --task lm`` crashed on the last, shorter batch)."""
    from laya_cli.auditing.lm import token_data

    _, path = aligned
    model = lm_from_checkpoint(read_checkpoint(path))
    data = token_data(model, None, 10**6, 8)
    n_blocks = sum(len(x) for x in data.blocks)
    assert n_blocks % 8 and len(data.positions) == len(data.features.labels) == n_blocks * 15
    assert torch.equal(data.positions[-15:], torch.arange(15))
