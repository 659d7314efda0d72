"""Every option of every command, tried hostile (issue 48), generated from the command line itself: each value
ends in exit 2 with one line naming the option, or runs; never exit 3, a traceback, or a file written by a run
that refused its input. The fast sweep sends the values no option accepts (nan, ±inf, text for a number, an
unknown choice, a folder for an output file); ``-m slow`` adds the values some accept (0, −1, huge) and runs them."""

from __future__ import annotations

import math
import pathlib

import pytest
import typer
from helpers import invoke

from laya_cli.auditing import settings as audit_settings
from laya_cli.auditing.diff import settings as diff_settings
from laya_cli.cli.group import app
from laya_cli.data import settings as data_settings
from laya_cli.depthing import settings as depth_settings
from laya_cli.exporting import settings as export_settings
from laya_cli.model import settings as model_settings
from laya_cli.runtime import environment
from laya_cli.runtime.declare import declared
from laya_cli.training import bench
from laya_cli.training import settings as train_settings

# Every module that declares settings (each stage owns its own)
DECLARING = (model_settings, data_settings, train_settings, bench, audit_settings, diff_settings, depth_settings,
             export_settings, environment)  # fmt: skip

COMMANDS = ("train", "audit", "depth", "export", "diff", "bench", "info")
REFUSED_NUMBERS = ("nan", "inf", "-inf", "abc")
ACCEPTED_SOMETIMES = ("0", "-1", "1e12")
SKIP = {"config", "log_to", "help"}  # --config's file is its own suite (test_config_file), --log-to test_tracking


def choices_of() -> dict[str, tuple[str, ...]]:
    """The declared choices by option name (what an unknown value must be refused against)."""
    classes = [getattr(m, n) for m in DECLARING for n in dir(m) if isinstance(getattr(m, n), type)]
    out = {}
    for cls in classes:
        try:
            fields = declared(cls)
        except TypeError:
            continue
        out.update({d.name: d.option.choices for d in fields if d.option.choices})
    return out


def options(command: str):
    click = typer.main.get_command(app).commands[command]
    return [p for p in click.params if p.param_type_name == "option" and not p.is_flag and p.name not in SKIP]


def base_args(command: str, ckpt: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    """A run of ``command`` that would work: the hostile option comes after it (click keeps the last value)."""
    return {
        "train": ["--dataset", "digits", "--epochs", "1", "--out", str(tmp / "o.pt")],
        "audit": [str(ckpt), "--samples", "8", "--compare", "gradxact"],
        "depth": [str(ckpt), "--samples", "8", "--time-repeats", "0"],
        "export": [str(ckpt), "--samples", "8", "--no-plots", "--out", str(tmp / "exp")],
        "diff": [str(ckpt), str(ckpt), "--samples", "8", "--permutations", "10"],
        "bench": ["--dataset", "digits", "--epochs", "1", "--seeds", "1", "--heads", "last", "--out", str(tmp / "b")],
        "info": [str(ckpt)],
    }[command]


def hostile_values(param, choices: dict, tmp: pathlib.Path, slow: bool) -> list[str]:
    kind = param.type_descriptor.annotation
    if kind in (int, float):
        return [*REFUSED_NUMBERS, *(ACCEPTED_SOMETIMES if slow else ())]
    if param.name in choices:
        return ["no-such-choice"]
    if kind is pathlib.Path and param.name in ("json_out", "markdown", "junit", "plot"):
        return [str(tmp)]  # a folder where a file is to be written
    return []


def cases(slow: bool):
    choices = choices_of()
    for command in COMMANDS:
        for param in options(command):
            kinds = hostile_values(param, choices, pathlib.Path("TMP"), slow)
            for value in kinds:
                yield pytest.param(command, param.opts[0], value, id=f"{command}{param.opts[0]}={value}")


def check(result, command: str, flag: str, value: str, tmp: pathlib.Path, must_refuse: bool) -> None:
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert result.exit_code != 3 and "Traceback" not in result.output, f"{command} {flag} {value}: {result.output}"
    if result.exit_code == 2:
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1, f"{command} {flag} {value}: not one error line: {result.output}"
        assert not (tmp / "o.pt").exists() and not (tmp / "o.pt.state").exists(), "a refused run wrote its output"
    if must_refuse:
        assert result.exit_code == 2, f"{command} {flag} {value} was accepted: {result.output[-400:]}"
        named = flag in result.output or (value.startswith("/") and value in result.output)  # a path: the path
        assert named, f"the error names neither {flag} nor the path: {lines}"


@pytest.mark.parametrize("command, flag, value", list(cases(slow=False)))
def test_values_no_option_accepts_are_refused_in_one_line(digits_ckpt, tmp_path, command, flag, value):
    value = value.replace("TMP", str(tmp_path))
    result = invoke(command, *base_args(command, digits_ckpt, tmp_path), flag, value)
    check(result, command, flag, value, tmp_path, must_refuse=True)


@pytest.mark.slow
@pytest.mark.parametrize("command, flag, value", [c for c in cases(slow=True) if c.values[2] in ACCEPTED_SOMETIMES])
def test_values_some_options_accept_run_or_are_refused(digits_ckpt, tmp_path, command, flag, value):
    result = invoke(command, *base_args(command, digits_ckpt, tmp_path), flag, value)
    check(result, command, flag, value, tmp_path, must_refuse=False)


def test_the_sweep_covers_every_command_and_number():
    fast = list(cases(slow=False))
    assert {c.values[0] for c in fast} == set(COMMANDS) - {"info"}  # info takes no value option
    assert len(fast) > 200 and not math.isnan(len(fast))


OUTPUT_FILES = [
    ("train", "--out", "o.pt"),
    ("audit", "--json", "a.json"),
    ("audit", "--markdown", "a.md"),
    ("audit", "--junit", "a.xml"),
    ("depth", "--json", "d.json"),
    ("depth", "--markdown", "d.md"),
    ("depth", "--plot", "d.png"),
    ("diff", "--json", "f.json"),
    ("diff", "--markdown", "f.md"),
    ("bench", "--json", "b.json"),
    ("bench", "--markdown", "b.md"),
]


@pytest.mark.parametrize("command, flag, name", OUTPUT_FILES, ids=[f"{c}{f}" for c, f, _ in OUTPUT_FILES])
def test_an_existing_output_is_refused_without_overwrite_and_left_untouched(digits_ckpt, tmp_path, command, flag, name):
    existing = tmp_path / name
    existing.write_text("mine")
    result = invoke(command, *base_args(command, digits_ckpt, tmp_path), flag, str(existing))
    assert result.exit_code == 2 and flag in result.output and "--overwrite" in result.output, result.output
    assert existing.read_text() == "mine"


def test_overwrite_replaces_an_existing_output(digits_ckpt, tmp_path):
    existing = tmp_path / "a.json"
    existing.write_text("mine")
    result = invoke("audit", *base_args("audit", digits_ckpt, tmp_path), "--json", str(existing), "--overwrite")
    assert result.exit_code == 0, result.output
    assert existing.read_text().startswith("{")
