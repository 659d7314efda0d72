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
        "--dataset fashion-mnist",
        "trains or benches on the 60,000 Fashion-MNIST images: minutes to hours "
        "(the slow tests and docs/results/ cover it)",
    ),
    ("--backbone vit_base", "needs the Best Artworks data set and pretrained ViT-B weights (network)"),
    ("--backbone timm:resnet50 --weights", "needs the user's own weights file and image folder"),
    ("--backbone hf:bert-base-uncased", "needs BERT's pretrained weights from the hub (network) and the user's csv"),
    (
        "--backbone hf:./my-llama",
        "needs a model folder and WordNet for minutes of training (tests/test_text.py and benchmarks/text.py do both)",
    ),
    (
        "--ablation bypass",
        "needs a residual model whose blocks keep their input's shape (the README's digits MLP is none): "
        "tests/test_removal.py runs it on BERT, GPT-2 and Llama",
    ),
    (
        "--drop 2",
        "needs a residual model whose blocks keep their input's shape (the README's digits MLP is none; its refusal "
        "is tested): tests/test_removal.py runs --drop and --out on BERT",
    ),
    (
        "lm.pt",
        "needs a causal language model folder and a corpus (tests/test_lm.py trains one on made-up text; "
        "python -m benchmarks.causal_lm trains one from scratch on WordNet's glosses)",
    ),
    ("torchrun", "starts several processes per command (tests/test_distributed.py covers torchrun)"),
    ("--config run.toml", "reads the user's own run.toml (tests/test_config_file.py writes and replays one)"),
    (
        "--log-to mlflow",
        "logs to an MLflow database (tests/test_tracking.py logs to local stores and reads every number back)",
    ),
    (
        "laya audit new.pt --baseline main-audit.json --max-drop faithfulness=0.02 --junit",
        "the one-line overview of the regression gate: the CI section below runs the gate on files it makes",
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
    assert "laya train" in cmds and "laya info model.pt" in cmds
    assert any(c.startswith("laya bench --dataset fashion-mnist") and "--markdown fm.md" in c for c in cmds)  # joined
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
    # the digits workflow of the README: train, info, audit (table, JSON, Markdown, gate), export twice
    assert len(ran) >= 8, ran
    assert (tmp_path / "model.pt").is_file() and (tmp_path / "audit.json").is_file()
    assert (tmp_path / "export" / "report.html").is_file()
    assert (tmp_path / "export-parquet" / "samples.parquet").is_file()
