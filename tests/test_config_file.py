"""--config run.toml (issue 27): any option from a TOML file, flags over the file, one line for a bad key or type;
the resolved options recorded in the checkpoint and the audit JSON; ``laya info --options-toml`` replays a run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import assert_user_error, invoke

from laya_cli.runtime.tomlfile import toml_table, toml_value

try:
    import tomllib
except ImportError:  # Python 3.10: the backport laya itself reads with
    import tomli as tomllib

SMALL = "epochs = 2\nd-star = 16\nscore_hidden = 32\nseed = 11\nbatch-size = 64\n"


def _tensors(tree, path: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint, by its path."""
    if isinstance(tree, torch.Tensor):
        return {path: tree}
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _tensors(sub, f"{path}.{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _tensors(sub, f"{path}[{i}]").items()}
    return {}


def test_a_run_replayed_from_its_options_toml_is_bit_for_bit_the_same(tmp_path):
    (tmp_path / "run.toml").write_text(SMALL, encoding="utf-8")
    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    result = invoke("train", "--config", tmp_path / "run.toml", "--out", first, "-q")
    assert result.exit_code == 0, result.output

    shown = invoke("info", first, "--options-toml")
    assert shown.exit_code == 0, shown.output
    replay = tmp_path / "replay.toml"
    replay.write_text(shown.stdout, encoding="utf-8")
    table = tomllib.loads(shown.stdout)["train"]
    assert table["epochs"] == 2 and table["d_star"] == 16 and table["seed"] == 11 and "out" not in table

    result = invoke("train", "--config", replay, "--out", second, "-q")
    assert result.exit_code == 0, result.output
    a, b = (torch.load(p, weights_only=True) for p in (first, second))
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys() and len(ta) > 10
    assert [k for k in ta if not torch.equal(ta[k], tb[k])] == []
    assert a["head"]["config"]["d_star"] == 16 and a["train_config"]["epochs"] == 2
    assert a["metrics"] == b["metrics"]
    assert a["options"]["values"] == {**b["options"]["values"], "out": str(first)}


def test_flags_override_the_file_and_the_commands_table_overrides_the_top_level(tmp_path):
    (tmp_path / "run.toml").write_text(SMALL + "\n[train]\nseed = 5\n[audit]\nsamples = 10\n", encoding="utf-8")
    out = tmp_path / "m.pt"
    result = invoke("train", "--config", tmp_path / "run.toml", "--epochs", "1", "--out", out, "-q")
    assert result.exit_code == 0, result.output
    values = torch.load(out, weights_only=True)["options"]["values"]
    assert (values["epochs"], values["seed"], values["d_star"]) == (1, 5, 16)


def test_the_audit_json_records_the_resolved_options_and_the_model_can_come_from_the_file(tmp_path, digits_ckpt):
    cfg = tmp_path / "audit.toml"
    cfg.write_text(
        f'[audit]\nmodel = "{digits_ckpt}"\nsamples = 40\ncompare = "ig"\nfail-under = ["faithfulness=-1"]\n'
        f'json = "{tmp_path / "a.json"}"\n',
        encoding="utf-8",
    )
    result = invoke("audit", "--config", cfg, "--steps", "8", "-q")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "a.json").read_text())
    values = doc["options"]["values"]
    assert doc["options"]["command"] == "audit"
    assert values["model"] == str(digits_ckpt) and values["samples"] == 40 and values["steps"] == 8
    assert values["fail_under"] == ["faithfulness=-1"] and doc["n_samples"] == 40


@pytest.mark.parametrize("command", ["train", "audit", "depth", "export", "bench"])
@pytest.mark.parametrize(
    "text, fragments",
    [
        ("no_such_option = 1\n", ["'no_such_option'", "unknown option"]),
        ("samples = 'ten'\nseed = 'x'\n", ["must be an integer", "got str"]),
        ("device = 3\n", ["'device' must be a string"]),
        ("[trian]\nseed = 1\n", ["unknown table 'trian'"]),
        ("seed = [\n", ["not valid TOML"]),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path, digits_ckpt, command, text, fragments):
    if command in ("train", "bench"):
        text = text.replace("samples", "epochs")
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text, encoding="utf-8")
    args = [] if command in ("train", "bench") else [digits_ckpt]
    assert_user_error(invoke(command, *args, "--config", cfg), str(cfg), *fragments)


def test_a_missing_file_and_a_checkpoint_without_options(tmp_path, digits_ckpt):
    assert_user_error(invoke("train", "--config", tmp_path / "nope.toml"), "no such file")
    assert_user_error(invoke("info", digits_ckpt, "--options-toml"), "records no command-line options")


def test_list_options_take_a_list_or_one_string(tmp_path, digits_ckpt):
    cfg = tmp_path / "gate.toml"
    cfg.write_text('compare = ""\nsamples = 20\nfail-under = "accuracy=2"\n', encoding="utf-8")
    result = invoke("audit", digits_ckpt, "--config", cfg, "-q")
    assert result.exit_code == 1, result.output  # the gate from the file ran, and failed
    cfg.write_text("fail-under = [1, 2]\n", encoding="utf-8")
    assert_user_error(invoke("audit", digits_ckpt, "--config", cfg), "'fail-under' must be a string or a list")


@pytest.mark.parametrize(
    "value", [0.1, 3e-4, 1e-5, 1e300, -2.5, 7.0, math.inf, 12, True, False, 'a"b\\c\n', "α ✓", ["x", "y"], [1, 2]]
)
def test_toml_values_read_back_equal(value):
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value


def test_toml_table_leaves_out_none_and_comments_outputs():
    text = toml_table("train", {"a": None, "b": 1, "out": "m.pt"}, ("out",), "(note)")
    assert tomllib.loads(text) == {"train": {"b": 1}}
    assert '# out = "m.pt"  (note)' in text


def test_bench_reads_its_table_and_the_environments_tracker_does_not_count_as_a_given_option(tmp_path, monkeypatch):
    cfg = tmp_path / "bench.toml"
    cfg.write_text('[bench]\nepochs = 0\n[train]\nepochs = "not read by bench"\n', encoding="utf-8")
    assert_user_error(invoke("bench", "--config", cfg), "--epochs must be at least 1, got 0")  # [bench], not [train]
    monkeypatch.setenv("LAYA_LOG_TO", "none")
    result = invoke("bench", "--help")
    assert result.exit_code == 0, result.output
