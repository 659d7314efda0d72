"""Each setting declared once (runtime/fields.py): the command line's options, the Python API's keywords, the
checks and docs/options.md all come from the declarations, so they cannot drift apart."""

from __future__ import annotations

import inspect
import math
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import laya_cli
from laya_cli.auditing.settings import AuditScopeSettings, AuditSettings
from laya_cli.cli.declared import Use, options_of
from laya_cli.cli.group import app
from laya_cli.data.settings import DataSettings, EvalDataSettings
from laya_cli.depthing.settings import DepthSettings
from laya_cli.model.settings import HeadSettings
from laya_cli.runtime.declare import check_fields, declared
from laya_cli.runtime.errors import LayaError
from laya_cli.training.settings import LMSettings, TrainingSettings, TrainJobSettings

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = (
    HeadSettings,
    TrainingSettings,
    DataSettings,
    TrainJobSettings,
    EvalDataSettings,
    AuditSettings,
    AuditScopeSettings,
)
SETTINGS += (DepthSettings, LMSettings)


def cli_options(command: str) -> set[str]:
    """The parameter names of a command's options (what --config keys and the API's keywords are named after)."""
    click = typer.main.get_command(app).commands[command]
    return {p.name for p in click.params if p.param_type_name == "option"}


def keywords(*fns) -> set[str]:
    return {name for fn in fns for name in inspect.signature(fn).parameters}


# What the command line takes that the API does not, and why: the API gets loaders instead of a dataset, returns
# results instead of writing files, and shows no terminal output.
COMMAND_LINE_ONLY = {
    "config": "a TOML file of options",
    "verbose": "prints the resolved options",
    "log_to": "an experiment tracker",
    "quiet": "terminal output (the API: progress=)",
    "json_out": "writes a file (the API returns the result)",
    "markdown": "writes a file",
    "overwrite": "replaces an existing output file",
}
TRAIN_ONLY = {
    **COMMAND_LINE_ONLY,
    "out": "the checkpoint's path (the API: model.save)",
    "resume": "an interrupted run's state beside --out",
    "restart": "discards that state",
    "dataset": "the API trains on the caller's loaders",
    "data_dir": "as --dataset",
    "label": "as --dataset",
    "image_size": "as --dataset",
    "strict": "as --dataset",
    "image_column": "as --dataset",
    "label_column": "as --dataset",
    "text_column": "as --dataset",
    "encoding": "as --dataset",
    "feature_dtype": "fit holds a frozen backbone's features as it returns them",
    "task": "language models train from the command line (docs/lm.md)",
    "objective": "as --task",
    "block_size": "as --task",
    "eval_tokens": "as --task",
    "lens": "as --task",
    "lens_sample": "as --task",
    "lens_tokens": "as --task",
    "device_map": "as --task",
    "weights": "attach() takes the caller's model with its weights",
    "arch": "as --weights",
    "trust_pickle": "as --weights",
    "pretrained": "as --weights",
    "input_size": "the loaders' images set it",
    "finetune": "fit(frozen=)",
    "backbone": "attach(model)",
}
AUDIT_ONLY = {
    **COMMAND_LINE_ONLY,
    "model": "the API takes a LayaModel",
    "samples": "the loader is the subset",
    "dataset": "the API audits the caller's loader",
    "data_dir": "as --dataset",
    "encoding": "as --dataset",
    "cache": "as --dataset",
    "max_memory": "the caller's batch_size / internal_batch_size bound it",
    "precision": "the caller's model runs as it is",
    "device_map": "language models are audited from the command line",
    "fail_under": "a gate: its exit code is the command line's (the API returns the numbers)",
    "max_drop": "as --fail-under",
    "baseline": "as --fail-under",
    "allow_settings_change": "as --fail-under",
    "gate_on": "as --fail-under",
    "inconclusive_exit": "as --fail-under",
    "junit": "writes a file",
    "per_sample": "shapes --json (the API: result.per_sample())",
    "arch": "the API takes a built LayaModel",
}


def test_fit_and_attach_take_every_setting_laya_train_takes():
    api = keywords(laya_cli.fit, laya_cli.attach)  # fit(cache="disk") is --cache
    missing = cli_options("train") - api - set(TRAIN_ONLY)
    assert not missing, f"laya train options the API lacks: {sorted(missing)}"
    for name in ("layer_norm", "align", "alpha_entropy", "tau_start", "stop_on", "align_scope", "precision"):
        assert name in inspect.signature(laya_cli.fit).parameters  # the drift issue 46 found


def test_audit_takes_every_setting_laya_audit_takes():
    missing = cli_options("audit") - keywords(laya_cli.audit) - set(AUDIT_ONLY)
    assert not missing, f"laya audit options laya_cli.audit lacks: {sorted(missing)}"
    assert {"ci", "bootstrap", "tie_tol", "randomisation_samples"} <= keywords(laya_cli.audit)


def test_the_exceptions_are_real_options():
    """A stale name in the lists above would hide a missing keyword."""
    assert set(TRAIN_ONLY) - {"config", "verbose", "log_to", "json_out", "markdown"} <= cli_options("train")
    assert set(AUDIT_ONLY) - {"model"} <= cli_options("audit")


def test_an_unknown_keyword_is_one_line_with_the_closest_names():
    with pytest.raises(LayaError, match=r"audit takes no setting 'tie_tols' \(did you mean tie_tol"):
        laya_cli.audit(None, None, tie_tols=1e-3)
    with pytest.raises(LayaError, match="fit takes no setting 'layernorm'"):
        laya_cli.fit(None, None, layernorm=True)


def test_every_generated_option_carries_its_declared_help_and_default():
    click = typer.main.get_command(app).commands["train"]
    params = {p.name: p for p in click.params}
    for d in options_of(Use(TrainJobSettings)):
        assert params[d.name].help == d.option.help, d.name
        assert d.flag in params[d.name].opts, d.name
    assert params["d_star"].default == HeadSettings().d_star and params["device"].default == "auto"


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_every_declared_number_refuses_nan_inf_and_its_bounds(cls):
    """The checks come from the declaration: a finite number within its declared bounds, or one line naming the
    flag (the generated hostile sweep of every command: tests/test_hostile.py)."""
    for d in declared(cls):
        if d.type not in (int, float, int | None, float | None) or d.type is bool:
            continue
        for bad in (math.nan, math.inf, -math.inf):
            with pytest.raises(LayaError, match=d.flag):
                check_fields(cls(**{d.field: bad}))  # a Settings class refuses it as it is built
        low = d.option.minimum if d.option.minimum is not None else d.option.above
        if low is not None:
            with pytest.raises(LayaError, match=d.flag):
                check_fields(cls(**{d.field: low - 1}))


def test_whole_numbers_refuse_fractions_and_switches_refuse_strings():
    with pytest.raises(LayaError, match="--epochs must be a whole number, got 2.5"):
        TrainingSettings(epochs=2.5)  # checked as it is built: no invalid object exists
    with pytest.raises(LayaError, match="--layer-norm is a switch"):
        HeadSettings(layer_norm="yes")


def test_docs_options_page_is_what_the_command_line_says():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "option_tables.py"), "--check"], capture_output=True, timeout=120
    )
    assert proc.returncode == 0, "docs/options.md is out of date: run python tools/option_tables.py"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--task", "lm", "--stop-on", "combined"), "--stop-on only applies to classifiers"),
        (
            ("--task", "lm", "--layer-norm", "--alpha-entropy", "0.1"),
            "--layer-norm, --alpha-entropy only apply to classifiers",
        ),
        (("--task", "lm", "--tau-start", "3"), "--tau-start only applies to classifiers"),
        (("--objective", "ce"), "--objective only applies to language models (--task lm)"),
        (("--eval-tokens", "10"), "--eval-tokens only applies to language models (--task lm)"),
        (("--alpha-entropy", "inf"), "--alpha-entropy must be 0 (off) or positive and finite, got inf"),
        (("--tau-start", "inf"), "--tau-start must be positive and finite, got inf"),
    ],
)
def test_an_option_a_path_does_not_read_is_refused_in_one_line(tmp_path, args, fragment):
    """Before any data or model is read, and nothing is written."""
    from helpers import assert_user_error, invoke

    out = tmp_path / "m.pt"
    assert_user_error(invoke("train", *args, "--dataset", "text:none.txt", "--out", str(out)), fragment)
    assert list(tmp_path.iterdir()) == []


def test_a_name_the_command_takes_itself_is_not_fed_to_its_settings():
    """laya bench's own --align (the laya-aligned head's λ) must leave the template's TrainingSettings.align at its
    default (None: the kind of model's, training/defaults.py): the other heads train as laya train trains them."""
    from laya_cli.cli.declared import with_settings

    seen = {}

    @with_settings(req=TrainJobSettings)
    def command(align: float = 1.0, *, req: TrainJobSettings):
        seen.update(own=align, template=req.train.align)

    command(**{p: v.default for p, v in inspect.signature(command).parameters.items()})
    assert seen == {"own": 1.0, "template": None}


def _declaring_classes() -> list[type]:
    """Every settings class of the package (each stage's, the bench's, the gates', the diff's, the runtime's)."""
    import importlib
    import pkgutil

    out = []
    for info in pkgutil.walk_packages(laya_cli.__path__, "laya_cli."):
        if info.name.endswith("settings") or info.name in ("laya_cli.training.bench", "laya_cli.runtime.environment"):
            module = importlib.import_module(info.name)
            for cls in vars(module).values():
                if isinstance(cls, type) and cls.__module__ == module.__name__:
                    try:
                        out.append((cls, declared(cls)))
                    except TypeError:  # not a dataclass
                        continue
    return out


def test_every_whole_number_setting_declares_its_maximum():
    """Issue 66: a seed, a count or a width past what the code holds (or means) is refused before any work."""
    from laya_cli.runtime.declare import _allows

    classes = _declaring_classes()
    assert len(classes) >= 12
    missing = [
        f"{cls.__name__}.{d.name}"
        for cls, fields in classes
        for d in fields
        if _allows(int, d.type) and not _allows(bool, d.type) and not _allows(float, d.type)
        and d.option.maximum is None and d.option.below is None
    ]  # fmt: skip
    assert missing == []


def test_every_laya_variable_is_read_through_its_declaration_and_documented():
    """``os.environ`` reads of a ``LAYA_*`` name live in runtime/environment.py only, and each declared variable
    has a row in docs/usage.md's Environment table."""
    import re

    from laya_cli.runtime.environment import VARIABLES

    stray = []
    for path in (ROOT / "laya_cli").rglob("*.py"):
        if path.name == "environment.py":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"environ(\.get)?\W+[\"']LAYA_", line):
                stray.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert stray == []
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert [name for name in VARIABLES if f"| `{name}" not in usage] == []


def _frozen():
    from laya_cli.auditing.diff.settings import DiffSettings
    from laya_cli.exporting.settings import ExportSettings
    from laya_cli.gates.settings import GateSettings
    from laya_cli.model.settings import LoadSettings
    from laya_cli.runtime.environment import RunSettings

    return (EvalDataSettings, AuditSettings, AuditScopeSettings, DepthSettings, ExportSettings, DiffSettings,
            GateSettings, LoadSettings, RunSettings)  # fmt: skip


FROZEN = _frozen()


@pytest.mark.parametrize("cls", FROZEN, ids=lambda c: c.__name__)
def test_the_settings_of_audit_depth_export_and_diff_are_frozen_and_checked_when_built(cls):
    from laya_cli.runtime.declare import Settings

    assert issubclass(cls, Settings) and cls.__dataclass_params__.frozen


@pytest.mark.parametrize("cls", (EvalDataSettings, AuditSettings, DepthSettings), ids=lambda c: c.__name__)
def test_a_settings_object_is_valid_when_built_and_never_changed_after(cls):
    """Building validates (issue 69): no invalid object exists to be passed on; a step that needs another value
    makes a new, validated object (``evolve``) and leaves the first as it was."""
    import dataclasses

    from laya_cli.runtime.declare import evolve

    obj = cls()
    d = next(d for d in declared(cls) if d.type in (int, int | None) and d.option.minimum is not None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, d.field, 5)
    with pytest.raises(LayaError, match=d.flag):
        evolve(obj, **{d.field: d.option.minimum - 1})
    new = evolve(obj, **{d.field: d.option.minimum + 1})
    assert getattr(new, d.field) == d.option.minimum + 1 and getattr(obj, d.field) == getattr(cls(), d.field)


def test_building_keeps_a_choice_in_its_canonical_spelling_and_the_metrics_parsed():
    s = AuditSettings(ablation="MEAN", target="Label", metrics="sufficiency, aopc")
    assert (s.ablation, s.target, s.metrics) == ("mean", "label", ("aopc", "sufficiency"))
    with pytest.raises(LayaError, match="--metrics group"):
        AuditSettings(metrics="bogus")


def test_a_renamed_option_is_named_by_its_flag_when_refused_as_it_is_built():
    """bench's --audit-seed is the audit's --seed: the check that runs while the object is built names the flag
    the command spells, and so does a later evolve."""
    from laya_cli.runtime.declare import build, evolve

    with pytest.raises(LayaError, match="--audit-seed"):
        build(AuditSettings, {"audit_seed": -1}, rename={"seed": "audit_seed"})
    ok = build(AuditSettings, {"audit_seed": 3}, rename={"seed": "audit_seed"})
    with pytest.raises(LayaError, match="--audit-seed"):
        evolve(ok, seed=-1)


def test_resolving_makes_a_new_object_with_the_device_and_the_batch_size():
    from laya_cli.runtime.device import resolved

    given = AuditSettings(batch_size=None, device="CPU")
    ready = resolved(given)
    assert (ready.device, ready.batch_size) == ("cpu", AuditSettings().batch_size)
    assert (given.device, given.batch_size) == ("cpu", None)  # canonical when built; the plan's None kept
    # under torchrun CUDA resolves to this rank's GPU: a later step's new object keeps it
    from laya_cli.runtime.declare import evolve

    assert evolve(AuditSettings(device="cuda:1"), batch_size=2).device == "cuda:1"
    with pytest.raises(LayaError, match="--device must be auto, cpu, cuda or mps, got 'tpu'"):
        AuditSettings(device="tpu")  # the words resolve_device says it with


def test_one_way_to_leave_a_setting_out_of_an_entry_point():
    """``Use`` says what a command or an API function offers: no declaration carries an API-only switch."""
    from laya_cli.runtime.declare import Option

    assert "api" not in {f.name for f in __import__("dataclasses").fields(Option)}
    export = inspect.signature(laya_cli.export).parameters
    assert "strip" in export and not {"audit", "depth", "model_card"} & set(export)
