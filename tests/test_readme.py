"""README.md's shell commands run as written, top to bottom, so they cannot rot.

Every command in a ```bash block of the README is either run here (in order, in one fresh folder,
in-process through the CLI) or skipped with a reason listed in SKIP: a command that is neither
fails the test, so a new README command must be run or explicitly excused.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import invoke

ROOT = Path(__file__).resolve().parents[1]

# (a fragment of the command, why this machine does not run it in a test)
SKIP = [
    ("make ", "creates a virtual environment and installs packages (the .ci/run job does that)"),
    ("pip install", "installs packages"),
    (
        "xrays",
        "needs the user's own image folder and, offline, a timm/torchvision model's weights (tests/test_front_door.py "
        "and benchmarks/newcomer.py run the same with an image folder and a weights file they make)",
    ),
    (
        "hf:./my-bert",
        "needs the user's transformers folder and csv (tests/test_front_door.py fine-tunes a folder it makes)",
    ),
    (
        "hf:./my-gpt",
        "needs a causal language model folder and a corpus (tests/test_lm.py trains one on made-up text)",
    ),
    (
        "lm.pt",
        "needs a language model's checkpoint (tests/test_lm.py and tests/test_api_lm.py make one)",
    ),
    (
        "--drop 2",
        "needs a residual model whose blocks keep their input's shape (the README's digits MLP is none; its refusal "
        "is tested): tests/test_removal.py runs --drop and --out on BERT",
    ),
    (
        "laya audit new.pt --baseline main-audit.json --max-drop faithfulness=0.02 --junit",
        "needs a baseline audit of the model on main (tests/test_regression.py runs the regression gate on files it "
        "makes)",
    ),
]
# Files the README's commands read but do not make: the CI section's two versions of a model (on main, in the pull
# request) are the README's own digits model, twice.
STAND_INS = {"main.pt": "model.pt", "new.pt": "model.pt"}
# Commands whose documented outcome is a gate: 0 when every threshold is met, 1 when one is missed.
GATES = ("--fail-under",)


def readme_commands(text: str) -> list[str]:
    """The commands of every ```bash block, in order: comments dropped, backslash continuations joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(" ".join(shlex.quote(w) for w in words))
    return commands


def skip_reason(command: str) -> str | None:
    return next((why for fragment, why in SKIP if fragment in command), None)


def test_the_readme_parser_sees_the_commands():
    cmds = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "laya train --out model.pt" in cmds and "laya info model.pt" in cmds
    assert all("#" not in c for c in cmds)


def test_every_readme_command_is_run_or_excused():
    for command in readme_commands((ROOT / "README.md").read_text(encoding="utf-8")):
        words = shlex.split(command)
        assert words[0] == "laya" or skip_reason(command), f"README command neither run nor excused: {command}"


@pytest.mark.slow
def test_readme_commands_run_as_written_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran, skipped = [], []
    for command in readme_commands((ROOT / "README.md").read_text(encoding="utf-8")):
        why = skip_reason(command)
        if why:
            skipped.append((command, why))
            continue
        words = shlex.split(command)
        assert words[0] == "laya", command
        for name, source in STAND_INS.items():
            if name in words and not (tmp_path / name).exists():
                shutil.copy(tmp_path / source, tmp_path / name)
        result = invoke(*words[1:])
        allowed = (0, 1) if any(g in command for g in GATES) else (0,)
        assert result.exit_code in allowed, f"`{command}` exited {result.exit_code}:\n{result.output}"
        ran.append(command)
    # the digits workflow of the README: train, info, audit (JSON, gates), export, depth, diff
    assert len(ran) >= 8, ran
    assert (tmp_path / "model.pt").is_file() and (tmp_path / "audit.json").is_file()
    assert (tmp_path / "export" / "report.html").is_file()
