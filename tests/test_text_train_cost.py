"""``benchmarks/text_train_cost.py`` (issue 73): one cell on a tiny BERT built from its config — the training job
timed beside the model's forward over the same tokens, and where its time went."""

from __future__ import annotations

import csv
import json

import pytest

from benchmarks import text_train_cost

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_one_cell_times_the_job_its_parts_and_the_forward(tmp_path, monkeypatch, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=300, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)  # fmt: skip
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path / "bert")
    words = {"a": "red green blue", "b": "cat dog fish", "c": "sun rain snow"}
    with open(tmp_path / "data.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows((f"{words[k].split()[i % 3]} and the {words[k]} {i}", k) for i in range(30) for k in words)
    monkeypatch.chdir(tmp_path)
    argv = ["--cell", "--model", str(tmp_path / "bert"), "--data", str(tmp_path / "data.csv"), "--max-length", "8",
            "--set", "epochs=2", "--set", "batch-size=16"]  # fmt: skip
    assert text_train_cost.main(argv) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["texts"] == 90 and got["batch"] == 16 and got["epochs"] == 2
    assert got["align"] == 1.0 and got["align_target"] == "network"  # the frozen transformer's default term
    parts = got["parts"]
    assert parts["extract"] > 0 and parts["head epochs"] > 0 and parts["network term"] > 0
    assert sum(parts.values()) == pytest.approx(got["train"]) and parts["rest"] >= 0
    assert got["ratio"] == pytest.approx(got["train"] / (sum(got["forward"]) / 2)) and got["forward_by_length"] > 0
    got["load"] = [1.0, 1.0]
    assert "| 1 | 1.00–1.00 |" in "\n".join(text_train_cost.summary([got]))


def test_settings_are_parsed_as_json_where_they_parse():
    assert text_train_cost.options_of(["epochs=5", "align=0", "head=last", "align-target=head"]) == {
        "epochs": 5, "align": 0, "head": "last", "align_target": "head"}  # fmt: skip


@pytest.mark.parametrize("args", [["--texts", "-1"], ["--texts", "0"], ["--cells", "0"], ["--max-length", "1"],
                                  ["--threads", "0"]])  # fmt: skip
def test_counts_below_their_least_are_one_line_and_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        text_train_cost.parse(args)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"got {args[1]}")
