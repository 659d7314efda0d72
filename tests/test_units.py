"""Every line names its unit and its count (issue 64): laya train's epoch lines, a language model's held-out
caption, its by-position table and laya info's options as the run used them."""

from __future__ import annotations

from types import SimpleNamespace

from laya_cli.report.info import training_text
from laya_cli.report.lm import by_position_rows, caption, number
from laya_cli.report.train import epoch_line


def test_epoch_lines_say_the_unit_of_each_figure():
    """'loss 46.3225' beside 'val CE 10.9509 bits': the loss is nats per token with every term summed."""
    lm = SimpleNamespace(epoch=2, loss=46.3225, val_kl_bits=0.0449, val_ce_bits=10.9509, seconds=4.6, best=False)
    line = epoch_line(lm)
    assert "train objective 46.3225 nats/token (all terms summed)" in line
    assert "held-out KL 0.0449, CE 10.9509 bits/token" in line
    clf = SimpleNamespace(epoch=1, loss=0.52, train_accuracy=0.9, val_accuracy=0.88, val_faithfulness=None,
                          seconds=0.3, best=True)  # fmt: skip
    assert "loss 0.5200 nats/sample (all terms summed)" in epoch_line(clf)  # no cross-entropy apart: the sum
    alone = SimpleNamespace(**{**vars(clf), "cross_entropy": 0.52})
    assert "CE 0.5200 nats/sample  train acc" in epoch_line(alone)
    aligned = SimpleNamespace(**{**vars(clf), "loss": 3.82, "cross_entropy": 2.49})  # issue 71: the sum rose
    assert "CE 2.4900 + α terms 1.3300 nats/sample" in epoch_line(aligned)


def test_the_held_out_caption_says_eval_tokens_were_rounded_up_to_whole_batches():
    """'--eval-tokens 2000' then 'held-out, 7,245 positions' with no word of why."""
    metrics = {"tokens": 7245, "tokens_asked": 2000, "lens": {"kind": "tuned", "positions": 0}}
    assert caption(metrics).startswith("held-out, 7,245 positions (--eval-tokens 2,000, rounded up to whole batches)")
    assert caption({**metrics, "tokens_asked": 7245}).startswith("held-out, 7,245 positions;")
    # issue 71: fewer positions than asked is no rounding up; the lenses' share says why it is under --lens-tokens
    short = {"tokens": 3429, "tokens_asked": 20000, "lens": {"kind": "tuned", "positions": 256, "tokens": 44}}
    text = caption(short)
    assert text.startswith("held-out, 3,429 positions (all the held-out text holds; --eval-tokens 20,000)")
    assert "lenses on 44 sampled positions (--lens-tokens 256, spread over --eval-tokens 20,000" in text
    assert number(-0.00001, "{:.4f}") == "0.0000" and number(-0.5, "{:.4f}") == "-0.5000"


def test_a_by_position_table_counts_the_positions_whose_faithfulness_is_defined():
    """A by-position table headed '(n=512)' when most samples were undefined."""
    block = {"positions": ["1-8", "9-16"], "n": [512, 512], "methods": {"laya": {"faithfulness": [0.4, None],
             "defined": [40, 0], "deletion@1": [0.1, 0.1]}}}  # fmt: skip
    header, rows = by_position_rows({"head": block})
    assert header[2] == "t 1-8 (512 positions)" and rows == [["head", "laya", "0.400 (40)", "n/a"]]


def test_laya_info_shows_an_unset_option_as_the_run_used_it():
    """'--block-size none' beside 'blocks of 64 tokens'."""
    text = training_text({"block_size": None, "epochs": 2, "device_map": None}, (), {"block_size": 64})
    assert text == "--block-size 64 (default) · --epochs 2 · --device-map none"
