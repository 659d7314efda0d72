"""Same inputs, same numbers: audit and export are deterministic across runs."""

import json

import pytest
from helpers import invoke


def test_audit_numbers_are_identical_across_runs(digits_ckpt, tmp_path):
    outs = []
    for i in range(2):
        path = tmp_path / f"a{i}.json"
        r = invoke(*["audit", str(digits_ckpt), "--compare", "all", "--samples", "120", "--json", str(path)])
        assert r.exit_code == 0, r.output
        outs.append(json.loads(path.read_text()))
    assert outs[0]["methods"] == outs[1]["methods"]
    assert outs[0]["accuracy"] == outs[1]["accuracy"]


def test_export_tables_are_identical_across_runs(digits_ckpt, tmp_path):
    for i in range(2):
        r = invoke(*["export", str(digits_ckpt), "--out", str(tmp_path / f"e{i}"), "--no-plots", "--samples", "100"])
        assert r.exit_code == 0, r.output
    for name in ("samples.csv", "profiles.csv", "attention_shift.csv"):
        assert (tmp_path / "e0" / name).read_bytes() == (tmp_path / "e1" / name).read_bytes(), name


@pytest.mark.parametrize("command", ["audit", "export"])
@pytest.mark.parametrize(
    "args,fragment",
    [(["--samples", "-1"], "--samples must be at least 1"), (["--samples", "0"], "--samples must be at least 1")],
)
def test_absurd_sizes_are_user_errors(digits_ckpt, tmp_path, command, args, fragment):
    extra = ["--out", str(tmp_path / "e")] if command == "export" else []
    r = invoke(*[command, str(digits_ckpt), *args, *extra])
    assert r.exit_code == 2 and fragment in r.output and "Traceback" not in r.output
    assert not (tmp_path / "e").exists()


def test_audit_batch_size_zero(digits_ckpt):
    r = invoke(*["audit", str(digits_ckpt), "--batch-size", "0"])
    assert r.exit_code == 2 and "--batch-size must be at least 1" in r.output
