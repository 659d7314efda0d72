"""``laya train --exit-aware W`` on a classifier (training/exit_aware.py ``TruncatedTerm``): the head it trains at
depth k is the masked head ``laya depth`` reads at k, the run records it and replays, bad values are one line."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from laya_cli.depthing.truncation import keep_mask, masked_output, truncated_inputs
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.heads import build_head
from laya_cli.model.settings import HeadSettings
from laya_cli.training.exit_aware import TruncatedTerm, truncated_rows
from laya_cli.training.settings import TrainingSettings
from laya_cli.training.shaping import AlphaShaping
from tests.helpers import assert_user_error, invoke


def _head_and_features(n=12, dims=(5, 7, 4), classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    feats = [torch.randn(n, d, generator=g) for d in dims]
    reference = [torch.randn(d, generator=g) for d in dims]
    torch.manual_seed(seed)
    head = build_head("laya", list(dims), classes, HeadSettings(d_star=8, score_hidden=16)).eval()
    return head, feats, reference, torch.randint(0, classes, (n,), generator=g)


def test_each_row_is_the_masked_head_laya_depth_reads_at_its_depth():
    """Row b of the truncated batch, through the head with its mask, is ``masked_output`` at depth k_b (r̄ above k,
    α masked and renormalised), for several depths in one batch."""
    head, feats, reference, _ = _head_and_features()
    depths = torch.tensor([1, 2, 1, 2, 2, 1, 1, 2, 1, 2, 2, 1])
    seen, keep = truncated_rows(feats, reference, depths)
    with torch.no_grad():
        got = head(seen, alpha_mask=keep).logits
    for k in (1, 2):
        rows = depths == k
        assert torch.equal(keep[rows], keep_mask(3, k).expand(int(rows.sum()), -1))
        for mine, theirs in zip(seen, truncated_inputs([f[rows] for f in feats], reference, k)):
            assert torch.equal(mine[rows], theirs)
        want = masked_output(head, [f[rows] for f in feats], reference, k).logits
        torch.testing.assert_close(got[rows], want)


def test_the_term_is_the_weighted_cross_entropy_at_the_drawn_depths():
    """Fixed r̄ (a frozen backbone's training mean) is the one used; the depths are torch's global draws in
    1..L−1; end to end (no r̄ given) the batch's own mean is."""
    head, feats, reference, y = _head_and_features()
    for given in (reference, None):
        torch.manual_seed(5)
        got = TruncatedTerm(0.7, given).loss(head, feats, y)
        torch.manual_seed(5)
        depths = torch.randint(1, 3, (len(y),))
        assert 1 <= int(depths.min()) and int(depths.max()) <= 2
        fill = given if given is not None else [f.mean(0) for f in feats]
        seen, keep = truncated_rows(feats, fill, depths)
        want = 0.7 * F.cross_entropy(head(seen, alpha_mask=keep).logits, y)
        torch.testing.assert_close(got, want)
    assert TruncatedTerm(1.0).loss(head, feats[:1], y) == 0.0  # one layer: no depth to exit at


def test_shaping_adds_it_to_the_loss_and_only_when_on():
    head, feats, reference, y = _head_and_features()
    off = AlphaShaping(TrainingSettings(layer_dropout=0.2), head)
    assert off.truncated is None and off.loss(head, feats, y) == 0.0
    on = AlphaShaping(TrainingSettings(exit_aware=1.0), head, reference)
    assert AlphaShaping.wanted(TrainingSettings(exit_aware=1.0)) and on.truncated.reference is not None
    assert float(on.loss(head, feats, y).detach()) > 0


def _train(tmp_path, name, *extra):
    out = tmp_path / f"{name}.pt"
    r = invoke("train", "--dataset", "digits", "--epochs", "2", "--out", out, "--quiet", *extra)
    assert r.exit_code == 0, r.output
    return out


def test_a_run_with_it_records_it_trains_another_head_and_replays(tmp_path):
    aware = _train(tmp_path, "aware")  # the built-in mlp end to end: on by default (backbones/defaults.py)
    plain = _train(tmp_path, "plain", "--exit-aware", "0")
    config = json.loads(invoke("info", aware, "--json").stdout)["train_config"]
    assert config["exit_aware"] == 1.0
    assert read_checkpoint(plain)["train_config"]["exit_aware"] == 0.0
    cnn = _train(tmp_path, "cnn", "--backbone", "cnn", "--epochs", "1")
    assert read_checkpoint(cnn)["train_config"]["exit_aware"] == 0.0  # a kind not measured: off
    a, p = read_checkpoint(aware), read_checkpoint(plain)
    assert any(not torch.equal(v, p["head"]["weights"][k]) for k, v in a["head"]["weights"].items())
    again = read_checkpoint(_train(tmp_path, "again", "--exit-aware", "1"))  # given: as the default
    for k, v in a["head"]["weights"].items():
        assert torch.equal(v, again["head"]["weights"][k]), k
    assert invoke("depth", aware).exit_code in (0, 1)  # 1: a goal of laya depth's own missed


def test_one_tapped_layer_has_nothing_to_truncate_and_trains_without_it(tmp_path):
    out = _train(tmp_path, "one", "--layers", "blocks.2", "--epochs", "1")  # the default's W 1 given no depth
    assert read_checkpoint(out)["train_config"]["exit_aware"] == 0.0


def test_a_frozen_backbone_trains_with_it_on_its_training_mean(tmp_path):
    out = _train(tmp_path, "frozen", "--frozen", "--exit-aware", "0.5")
    assert read_checkpoint(out)["train_config"]["exit_aware"] == 0.5


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--exit-aware", "nan"], "--exit-aware"),
        (["--exit-aware", "inf"], "--exit-aware"),
        (["--exit-aware", "-1"], "--exit-aware"),
        (["--exit-aware", "1", "--head", "mean"], "--head laya or scalarmix"),
    ],
)
def test_bad_values_are_one_line_and_write_nothing(tmp_path, args, fragment):
    out = tmp_path / "m.pt"
    assert_user_error(invoke("train", "--dataset", "digits", *args, "--out", out), fragment)
    assert not out.exists()


def test_the_benchmark_pairs_each_weight_with_the_baseline_of_its_seed():
    """``benchmarks.exit_aware``'s paired column: each run minus the first weight's run of the same seed."""
    from benchmarks.exit_aware import paired, tables

    rows = [{"weight": w, "seed": s, "accuracy": a, "exit_pmax": e, "exit_alpha": 0.1, "head_laya": None,
             "net_laya": 0.5, "k1": 0.9, "exit_oracle": 0.8, "d1_ratio": 1.0, "net_gradxact": 0.3, "train_s": 1.0}
            for w, s, a, e in (("0", 1, 0.9, 0.3), ("1", 1, 0.8, 0.7), ("0", 2, 0.95, 0.2),
                               ("1", 2, 0.97, 0.6))]  # fmt: skip
    base = {r["seed"]: r for r in rows if r["weight"] == "0"}
    runs = [r for r in rows if r["weight"] == "1"]
    assert paired(runs, base, "exit_pmax") == pytest.approx([0.4, 0.4])
    assert paired(runs, base, "accuracy") == pytest.approx([-0.1, 0.02])
    assert paired(runs, base, "head_laya") == []  # undefined on both: left out, not counted as 0
    line = tables(rows)[-1]  # the paired row of W 1: accuracy, p_max exit, α-mass exit, head faith, net faith
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "1" and cells[1].startswith("-0.0400 [") and cells[2].startswith("0.400")
    assert cells[3].startswith("0.000") and cells[4] == "n/a"
