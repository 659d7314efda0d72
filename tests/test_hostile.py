"""Every option of every command, tried hostile (issues 48 and 66), generated from the command line itself: each
value ends in exit 2 with one line naming the option, or runs; never exit 3, a traceback, or a file written by a run
that refused its input. The fast sweep sends the values no option accepts (nan, ±inf, text for a number, whole
numbers past int64, numbers past float64, an unknown choice, a folder for an output file), a file that is not UTF-8
and one that is binary to every option and argument that reads a file, and every ``LAYA_*`` variable the values its
declaration refuses; ``-m slow`` adds the values some accept (0, −1, huge) and runs them, and the variables' values
that run."""

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
from laya_cli.runtime.environment import VARIABLES
from laya_cli.training import bench
from laya_cli.training import settings as train_settings

# Every module that declares settings (each stage owns its own)
DECLARING = (model_settings, data_settings, train_settings, bench, audit_settings, diff_settings, depth_settings,
             export_settings, environment)  # fmt: skip

COMMANDS = ("train", "audit", "depth", "export", "diff", "bench", "info")
REFUSED_NUMBERS = ("nan", "inf", "-inf", "abc")
PAST_INT64 = ("9" * 25, "-" + "9" * 25)  # whole numbers no int64 holds (every count and seed declares a maximum)
PAST_FLOAT64 = ("1e309", "-1e309")  # read as ±inf
ACCEPTED_SOMETIMES = ("0", "-1", "1e12")
# Files that are not what an input should be: text in another encoding, bytes that are no text (made per test)
HOSTILE_FILES = ("LATIN1", "BINARY")
# The options and arguments that read a file, and how the value names it (a dataset: as a text data set's folder)
FILE_INPUTS = {"model": "{}", "model_a": "{}", "model_b": "{}", "weights": "{}", "baseline": "{}", "audit": "{}",
               "depth": "{}", "config": "{}", "arch": "{}:make", "dataset": "csv:{}"}  # fmt: skip
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
        past = PAST_INT64 if kind is int else PAST_FLOAT64
        return [*REFUSED_NUMBERS, *past, *(ACCEPTED_SOMETIMES if slow else ())]
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
                shown = value if len(value) < 12 else f"{value[:3]}…{len(value)}"
                yield pytest.param(command, param.opts[0], value, id=f"{command}{param.opts[0]}={shown}")


def file_cases():
    """(command, option or argument, hostile file kind): every input that reads a file, given one that is not UTF-8
    and one that is binary."""
    click = typer.main.get_command(app)
    for command in COMMANDS:
        for param in click.commands[command].params:
            if param.name in FILE_INPUTS:
                where = param.opts[0] if param.param_type_name == "option" else param.name
                for kind in HOSTILE_FILES:
                    yield pytest.param(command, where, kind, id=f"{command}:{where}={kind.lower()}")


def check(result, command: str, flag: str, value: str, tmp: pathlib.Path, must_refuse: bool, named="") -> None:
    """``named``: what the error must name besides the flag (default: the value when it is a path); None: either."""
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert result.exit_code != 3 and "Traceback" not in result.output, f"{command} {flag} {value}: {result.output}"
    if result.exit_code == 2:
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1, f"{command} {flag} {value}: not one error line: {result.output}"
        assert not (tmp / "o.pt").exists() and not (tmp / "o.pt.state").exists(), "a refused run wrote its output"
    if must_refuse:
        assert result.exit_code == 2, f"{command} {flag} {value} was accepted: {result.output[-400:]}"
        named = value if named == "" and value.startswith("/") else named  # a path: the path
        said = " ".join(result.output.split())
        assert named is None or flag in said or (named and named in said), (
            f"the error names neither {flag} nor {named}: {lines}"
        )


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


def hostile_file(tmp: pathlib.Path, kind: str, where: str) -> str:
    """The value naming a hostile file for ``where``: a file (a checkpoint, weights, JSON, TOML, a .py module) or a
    text data set's folder whose train.csv and test.csv hold it."""
    data = "caf\xe9 au lait, na\xefve\n".encode("latin-1") * 50 if kind == "LATIN1" else bytes(range(256)) * 40
    name = {"--arch": "bad.py", "--config": "bad.toml"}.get(where, "bad.bin")
    if where == "--dataset":
        folder = tmp / f"{kind.lower()}-data"
        folder.mkdir()
        for split in ("train.csv", "test.csv"):
            (folder / split).write_bytes(b"text,label\n" + data)
        return FILE_INPUTS["dataset"].format(folder)
    path = tmp / f"{kind.lower()}-{name}"
    path.write_bytes(data)
    return FILE_INPUTS.get(where.lstrip("-").replace("-", "_"), "{}").format(path)


def file_args(command: str, where: str, value: str, ckpt: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    """``command``'s working run with the hostile file in place of one argument, or as one option."""
    args = base_args(command, ckpt, tmp)
    if where.startswith("-"):
        return [*args, where, value]
    position = {"model": 0, "model_a": 0, "model_b": 1}[where]
    return [*args[:position], value, *args[position + 1 :]]


@pytest.mark.parametrize("command, where, kind", list(file_cases()))
def test_files_that_are_not_utf8_or_not_text_are_refused_in_one_line(digits_ckpt, tmp_path, command, where, kind):
    value = hostile_file(tmp_path, kind, where)
    result = invoke(command, *file_args(command, where, value, digits_ckpt, tmp_path))
    read = where != "--arch" or command == "train"  # a checkpoint trained without --arch does not import one
    check(result, command, where, value, tmp_path, must_refuse=read, named=value.partition(":")[0]
          if where == "--arch" else value.partition(":")[2] if where == "--dataset" else value)  # fmt: skip


def variable_values(name: str, slow: bool) -> list[str]:
    """The values of one ``LAYA_*`` variable its declaration refuses (fast) or that run (slow)."""
    kind = VARIABLES[name].kind
    if kind in ("number", "whole"):
        return ["7", "0.5"] if slow else ["abc", "nan", "inf", "-1", "9" * 400, "1e309"]
    if kind == "switch":
        return ["1", "off"] if slow else ["maybe", "2"]
    if name == "LAYA_LOG_TO":
        return [] if slow else ["nosuch:x"]
    return ["TMP/a-file/below", "TMP"] if slow else []  # a path under a file, a text a command may ignore


def variable_cases(slow: bool):
    for name in VARIABLES:
        for value in variable_values(name, slow):
            shown = value if len(value) < 12 else f"{value[:3]}…{len(value)}"
            yield pytest.param(name, value, id=f"{name}={shown}")


@pytest.mark.parametrize("name, value", list(variable_cases(slow=False)))
def test_every_variable_refuses_what_its_declaration_refuses_in_one_line(digits_ckpt, tmp_path, name, value):
    result = invoke("train", *base_args("train", digits_ckpt, tmp_path), env={name: value})
    check(result, "train", name, value, tmp_path, must_refuse=True, named=None if name == "LAYA_LOG_TO" else name)


@pytest.mark.slow
@pytest.mark.parametrize("name, value", list(variable_cases(slow=True)))
def test_every_variable_at_values_that_run(digits_ckpt, tmp_path, name, value):
    (tmp_path / "a-file").write_text("a file, not a folder")
    result = invoke(
        "train", *base_args("train", digits_ckpt, tmp_path), env={name: value.replace("TMP", str(tmp_path))}
    )
    check(result, "train", name, value, tmp_path, must_refuse=False)


def test_the_sweep_reaches_past_int64_and_float64_every_file_input_and_every_variable():
    fast = [c.values for c in cases(slow=False)]
    assert {v for _, _, v in fast} >= {*PAST_INT64, *PAST_FLOAT64}
    assert {(c, w) for c, w, _ in (p.values for p in file_cases())} >= {("audit", "model"), ("train", "--weights"),
            ("audit", "--baseline"), ("export", "--audit"), ("diff", "model_b"), ("train", "--dataset")}  # fmt: skip
    assert {n for n, _ in (p.values for p in variable_cases(slow=False))} == set(VARIABLES) - {
        "LAYA_CACHE_DIR", "LAYA_DATA_DIR", "LAYA_DIST_BACKEND"}  # fmt: skip
