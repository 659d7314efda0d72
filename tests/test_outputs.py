"""Output files are never replaced silently (issue 48): a command asked to write a file that exists refuses in one
line before any work unless told ``--overwrite`` (``fileio.check_new_outputs``, the one check every command calls);
two outputs may not name the same file."""

from __future__ import annotations

import pytest
from helpers import assert_user_error, invoke

from laya_cli.gates.outputs import AuditOutputs
from laya_cli.runtime.errors import LayaError
from laya_cli.runtime.fileio import check_new_outputs


def test_an_existing_file_is_refused_without_overwrite(tmp_path):
    old = tmp_path / "audit.json"
    old.write_text("kept")
    with pytest.raises(LayaError, match=r"^--json .*audit.json exists; pass --overwrite to replace it"):
        check_new_outputs({"--markdown": None, "--json": old}, overwrite=False)
    check_new_outputs({"--json": old}, overwrite=True)  # told to: fine
    check_new_outputs({"--json": tmp_path / "new.json", "--plot": None}, overwrite=False)  # a new file: fine
    assert old.read_text() == "kept"


def test_two_outputs_naming_one_file_and_unwritable_ones_are_refused(tmp_path):
    with pytest.raises(LayaError, match="--json and --markdown both name"):
        check_new_outputs({"--json": tmp_path / "x", "--markdown": tmp_path / "." / "x"}, overwrite=True)
    with pytest.raises(LayaError, match="it is a directory"):
        check_new_outputs({"--out": tmp_path}, overwrite=True)
    with pytest.raises(LayaError, match="does not exist"):
        check_new_outputs({"--junit": tmp_path / "no" / "j.xml"}, overwrite=False)


def test_the_audit_outputs_refuse_an_existing_file(tmp_path):
    (tmp_path / "j.xml").write_text("kept")
    with pytest.raises(LayaError, match="--junit .* exists"):
        AuditOutputs(tmp_path / "a.json", None, tmp_path / "j.xml").check_writable(overwrite=False)
    AuditOutputs(tmp_path / "a.json", None, tmp_path / "j.xml").check_writable(overwrite=True)


def test_depth_drop_refuses_to_replace_an_existing_checkpoint(digits_ckpt, tmp_path):
    existing = tmp_path / "small.pt"
    existing.write_bytes(b"someone's file")
    r = invoke("depth", digits_ckpt, "--drop", "1", "--out", existing, "--samples", "50", "--quiet")
    assert_user_error(r, f"--out {existing} exists", "--overwrite")
    assert existing.read_bytes() == b"someone's file"
