"""A command line's manners (issue 27): --version, shell completion, NO_COLOR / --no-color, -v and -q."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import assert_user_error, child_env, invoke

COMMANDS_WITH_CONFIG = ("train", "audit", "depth", "export", "bench")


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``code`` run by a fresh Python (nothing imported yet), its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env or child_env()
    )


def _colours(text: str) -> list[str]:
    """The SGR parameters in ``text`` that set a colour (foreground or background, 8/16/256/true colour)."""
    found = []
    for params in re.findall(r"\x1b\[([0-9;]*)m", text):
        codes = [int(c) for c in params.split(";") if c]
        found += [str(c) for c in codes if 30 <= c <= 49 or 90 <= c <= 107]
    return found


def test_version_names_laya_and_the_libraries_it_computes_with():
    from importlib import metadata

    result = invoke("--version")
    assert result.exit_code == 0, result.output
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert lines["laya"] == __import__("laya_cli").__version__
    for dist in ("torch", "timm", "captum"):
        assert lines[dist] == metadata.version(dist)
    assert lines["transformers"] == metadata.version("transformers")  # installed in the test extra


def test_version_imports_no_torch():
    code = (
        "import sys\nsys.argv = ['laya', '--version']\nfrom laya_cli.cli.group import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules, 'torch imported by --version'\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("laya ")


@pytest.mark.parametrize(
    "shell, marker",
    [
        ("bash", "complete -o default -F _laya_completion laya"),
        ("zsh", "#compdef laya"),
        ("fish", "complete --command laya"),
    ],
)
def test_show_completion_prints_the_script_for_the_shell(shell, marker):
    """Typer's completion, the shell named (Typer's switch for tests: no detection, the shell as the value)."""
    env = child_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    code = (
        f"import sys; sys.argv = ['laya', '--show-completion', {shell!r}]; from laya_cli.cli.group import main; main()"
    )
    proc = _python(code, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "_LAYA_COMPLETE" in proc.stdout  # the variable the completion script sets when it asks laya
    assert marker in proc.stdout


def test_help_lists_completion_version_and_no_color():
    result = invoke("--help")
    assert result.exit_code == 0
    for flag in ("--version", "--no-color", "--install-completion", "--show-completion"):
        assert flag in result.stdout


def _error_run(*args: str, **env: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "laya_cli", *args, "info", "no-such-model.pt"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(FORCE_COLOR="1", TERM="xterm-256color", **env),
    )
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr
    return proc.stderr


def test_no_color_env_and_flag_remove_the_colours():
    assert _colours(_error_run()), "a forced terminal should show the red 'error:'"
    assert _colours(_error_run(NO_COLOR="1")) == []
    assert _colours(_error_run("--no-color")) == []


def test_no_color_flag_is_undone_after_the_command():
    import os

    before = os.environ.get("NO_COLOR")
    assert invoke("--no-color", "info", "no-such-model.pt").exit_code == 2
    assert os.environ.get("NO_COLOR") == before


@pytest.mark.parametrize("command", COMMANDS_WITH_CONFIG)
def test_every_command_takes_verbose_quiet_and_config(command):
    result = invoke(command, "--help")
    for flag in ("--verbose", "-v", "--quiet", "-q", "--config"):
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", result.stdout), (command, flag)


@pytest.mark.parametrize("command", COMMANDS_WITH_CONFIG)
def test_quiet_and_verbose_together_is_one_line(command, digits_ckpt):
    args = [] if command in ("train", "bench") else [digits_ckpt]
    assert_user_error(invoke(command, *args, "-q", "-v"), "--quiet and --verbose")


def test_verbose_prints_the_resolved_options(digits_ckpt, tmp_path):
    result = invoke("audit", digits_ckpt, "--samples", "20", "--compare", "", "-v")
    assert result.exit_code == 0, result.output
    assert "options (defaults < flags):" in result.output and "samples=20" in result.output


@pytest.mark.parametrize(
    "words, cword, expected",
    [("laya tr", "1", "train"), ("laya audit --con", "2", "--config"), ("laya --ver", "1", "--version")],
)
def test_the_completion_script_gets_commands_and_options_from_laya(words, cword, expected):
    """What the installed script asks laya (bash): the completions of the word under the cursor."""
    env = child_env(_LAYA_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
    code = "import sys; sys.argv = ['laya']; from laya_cli.cli.group import main; main()"
    proc = _python(code, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout.split()


def test_a_checkpoints_version_record_reads_timm_without_importing_it():
    """``checkpoint.versions`` names timm's version from its metadata: a text model's training never imports timm
    (seconds, and wandb where installed) only to write it down; the string is timm's own ``__version__``."""
    code = (
        "import sys\nfrom laya_cli.model.checkpoint import versions\nv = versions()\n"
        "assert 'timm' not in sys.modules, 'timm imported'\nimport timm\n"
        "assert v['timm'] == timm.__version__ == versions()['timm'], (v, timm.__version__)\nprint('ok')\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
