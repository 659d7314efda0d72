"""The API as a notebook uses it (issue 71): notes raised as Python warnings and in the ``note`` column, flat
frames, a ``laya train`` checkpoint audited, exported and analysed on its own test split without a loader, a fit near
chance said."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import laya_cli
from laya_cli.auditing.results import flat_row


def test_a_checkpoint_is_audited_on_its_own_test_split_and_its_notes_are_warnings(digits_ckpt):
    model = laya_cli.load(digits_ckpt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = laya_cli.audit(model, compare="gradxact", progress=False)  # no loader: the digits test split
    assert result.n_samples == model.checkpoint["metrics"]["n_test"]
    said = [str(w.message) for w in caught if issubclass(w.category, laya_cli.LayaWarning)]
    assert result.summary["notes"] and len(said) == len(result.summary["notes"])
    assert all(w.filename == __file__ for w in caught if issubclass(w.category, laya_cli.LayaWarning))
    frame = result.to_pandas()
    assert frame.loc["laya", "note"]  # the audit's notes about α and about Δ reach the laya row
    cells = [v for v in frame.to_numpy().ravel() if isinstance(v, (dict, list, tuple))]
    assert cells == []


def test_export_and_depth_read_the_checkpoints_own_test_split_as_audit_does(digits_ckpt):
    """``laya_cli.export(model)`` and ``depth(model)`` needed a loader where ``audit(model)`` needed none (issue 71):
    all three read the split the checkpoint's test accuracy was measured on, every sample."""
    model = laya_cli.load(digits_ckpt)
    metrics = model.checkpoint["metrics"]
    exp = laya_cli.export(model, progress=False)
    assert len(exp.table) == metrics["n_test"]
    assert (exp.table["label"] == exp.table["predicted"]).mean() == pytest.approx(metrics["test_accuracy"], abs=1e-6)
    deep = laya_cli.depth(model, progress=False)
    assert deep.full["accuracy"] == pytest.approx(metrics["test_accuracy"], abs=1e-6)


def test_a_model_fitted_on_own_loaders_has_no_split_of_its_own_and_the_error_says_pass_one():
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.rand(60, 1, 4, 4), torch.arange(60) % 3), batch_size=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", laya_cli.LayaWarning)  # a fit near chance: not this test's point
        model = laya_cli.fit(laya_cli.attach(_Flat()), data, epochs=1, seed=0, progress=False)
    for call in (laya_cli.export, laya_cli.depth):
        with pytest.raises(laya_cli.LayaError, match=r"pass a loader: laya_cli\.audit\(model, loader\), export"):
            call(model, progress=False)
    assert len(laya_cli.export(model, data, progress=False).table) == 60  # with the loader: its samples


def test_intervals_become_columns_of_their_own():
    scores = {
        "faithfulness": 0.7,
        "note": None,
        "deletion_curve": [0.5, 0.2],
        "ci_level": 0.95,
        "ci": {"faithfulness": {"ci_low": 0.6, "ci_high": 0.8, "n_defined": 90}},
        "vs_laya": {"faithfulness": {"difference": -0.1, "ci_low": -0.2, "ci_high": 0.0, "n_defined": 90}},
        "ig_steps": {"mean": 20.0, "max": 64, "histogram": [1, 2]},
    }
    row = flat_row(scores, ["faithfulness is degenerate on 3 of 90 samples"])
    assert row == {
        "faithfulness": 0.7,
        "note": "faithfulness is degenerate on 3 of 90 samples",
        "ci_level": 0.95,
        "faithfulness_ci_low": 0.6,
        "faithfulness_ci_high": 0.8,
        "faithfulness_n_defined": 90,
        "faithfulness_vs_laya": -0.1,
        "faithfulness_vs_laya_ci_low": -0.2,
        "faithfulness_vs_laya_ci_high": 0.0,
        "faithfulness_vs_laya_n_defined": 90,
        "ig_steps_mean": 20.0,
        "ig_steps_max": 64,
    }


class _Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3)])

    def forward(self, x):
        return self.blocks(x.flatten(1))


def test_a_fit_that_ends_near_chance_warns():
    torch.manual_seed(0)
    noise = TensorDataset(torch.rand(200, 1, 4, 4), torch.randint(0, 10, (200,)))  # labels carry no signal
    with pytest.warns(laya_cli.LayaWarning, match="within noise of chance"):
        laya_cli.fit(laya_cli.attach(_Flat()), DataLoader(noise, batch_size=50), epochs=1, seed=0, progress=False)


def test_the_sample_strip_shows_each_class_and_its_errors():
    """report.html's strip was the first 8 samples: 8 of one class, 7 wrong (issue 71)."""
    from laya_cli.report.figures import strip_rows

    labels = [0] * 8 + [1] * 4 + [2] * 4
    correct = [False] * 7 + [True] + [True, False, True, True] + [True] * 4
    rows = strip_rows(labels, correct, 8)
    assert len(rows) == 8 and {labels[i] for i in rows} == {0, 1, 2}
    assert 7 in rows and 0 in rows and 8 in rows and 9 in rows and 12 in rows  # a correct and a wrong one of each
    assert rows == sorted(rows, key=lambda i: (labels[i], i))
    assert strip_rows(labels, correct, 2) == [7, 8]  # fewer than the classes: the correct ones first, in class order
