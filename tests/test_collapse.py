"""α collapse measures (auditing/collapse.py) against scipy and by construction."""

import html
import math

import numpy as np
import pytest
import torch
from scipy.stats import entropy

from laya_cli.auditing.collapse import (
    alpha_entropy,
    collapse_notes,
    collapse_summary,
    collapse_warning,
    effective_layers,
    top_layer_spread,
    trained_against,
)
from laya_cli.report.collapse import collapse_text


def test_entropy_matches_scipy_on_random_rows():
    alpha = torch.softmax(torch.randn(50, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3, -1)
    want = entropy(alpha.numpy().T)  # scipy: along axis 0
    np.testing.assert_allclose(alpha_entropy(alpha).numpy(), want, rtol=1e-10)


def test_one_hot_rows_have_zero_entropy_and_one_effective_layer():
    alpha = torch.nn.functional.one_hot(torch.tensor([2, 2, 0]), 4).float()
    assert alpha_entropy(alpha).tolist() == [0.0, 0.0, 0.0]
    assert effective_layers(alpha).tolist() == [1.0, 1.0, 1.0]


def test_uniform_rows_use_every_layer():
    alpha = torch.full((3, 6), 1 / 6)
    assert effective_layers(alpha).tolist() == pytest.approx([6.0] * 3)
    assert alpha_entropy(alpha)[0].item() == pytest.approx(math.log(6))


def test_top_layer_spread_counts_samples_peaking_off_the_modal_layer():
    alpha = torch.nn.functional.one_hot(torch.tensor([1, 1, 1, 3]), 4).float()
    assert top_layer_spread(alpha) == 0.25


def test_a_head_on_the_last_layer_for_everyone_is_collapsed():
    alpha = torch.full((400, 6), 1e-5)
    alpha[:, -1] = 1 - 5e-5
    s = collapse_summary(alpha)
    assert s["collapsed"] and s["modal_top_layer"] == 5
    assert s["effective_layers_mean"] < 1.01
    assert "collapsed onto L5" in collapse_warning(s, [f"L{i}" for i in range(6)])


def test_spread_or_per_sample_variation_is_not_collapse():
    gen = torch.Generator().manual_seed(1)
    assert not collapse_summary(torch.softmax(torch.randn(200, 6, generator=gen), -1))["collapsed"]
    peaks = torch.nn.functional.one_hot(torch.randint(0, 6, (200,), generator=gen), 6).float()
    assert not collapse_summary(peaks)["collapsed"]  # one layer each, but a different one per sample


def test_only_a_collapsed_alpha_gets_the_warning_note():
    collapsed = collapse_summary(torch.nn.functional.one_hot(torch.full((10,), 1), 3).float())
    (note,) = collapse_notes(collapsed, ["a", "b", "c"])
    assert note.startswith("warning: α has collapsed onto b: 1.00 effective layers of 3")
    assert collapse_notes(collapse_summary(torch.full((10, 3), 1 / 3)), ["a", "b", "c"]) == []
    assert collapse_notes(None) == []  # a head without α


def test_a_collapsed_alpha_trained_against_the_network_is_a_finding_not_a_warning():
    alpha = torch.nn.functional.one_hot(torch.full((10,), 1), 3).float()
    s = collapse_summary(alpha, "network")
    assert s["collapsed"] and s["finding"] and s["trained_against"] == "network"
    (note,) = collapse_notes(s, ["a", "b", "c"])
    assert note.startswith("α concentrates on b (1.00 effective layers of 3") and "warning" not in note
    assert "the layer its prediction needs most" in note
    assert collapse_text(s, ["a", "b", "c"], flag="<b>{}</b>").endswith(
        " — concentrated on b (trained against the network's effects)"
    )
    for against in (None, "head"):  # no term, or the head's own effects: the head may have stopped reading the rest
        s = collapse_summary(alpha, against)
        assert not s["finding"] and collapse_notes(s, ["a", "b", "c"])[0].startswith("warning: α has collapsed onto b")
    assert not collapse_summary(torch.full((10, 3), 1 / 3), "network")["finding"]  # spread: nothing to say
    assert trained_against({"train_config": {"align": 1.0, "align_target": "network"}}) == "network"
    assert trained_against({"train_config": {"align": 1.0}}) == "head"  # before the target existed: the head's
    assert trained_against({"train_config": {"align": 0.0, "align_target": "head"}}) is None
    assert trained_against({}) is None and trained_against(None) is None


def test_the_one_line_every_output_writes():
    alpha = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])  # H = log 2 for both: 2 effective layers
    text = collapse_text(collapse_summary(alpha), ["a", "b", "c"])
    assert text == "entropy 0.693 ± 0.000 of max 1.099 nats, 2.00 of 3 effective layers, top-layer spread 0.0 %"
    s = collapse_summary(torch.nn.functional.one_hot(torch.tensor([2, 2]), 3).float())
    assert collapse_text(s, ["a", "b", "<c>"], flag="<b>{}</b>", escape=html.escape).endswith(
        " — <b>collapsed onto &lt;c&gt;</b>"
    )
    assert collapse_text(None) is None
    assert "entropy n/a ± n/a" in collapse_text(collapse_summary(torch.zeros(0, 3)))  # no samples: undefined, no crash
