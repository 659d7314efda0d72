"""Typer options made from the settings each stage declares on its dataclasses (``runtime.declare.setting``).

``with_settings(req=TrainJobSettings, …)`` gives a command every declared option of each class (a nested
dataclass field's too: a ``TrainJobSettings``'s head, data and training settings) after its own parameters, and
calls it with one object per class, built from the parsed values: valid (a ``runtime.declare.Settings`` checks
itself when built) and frozen. ``Use`` (runtime/declare.py) says which settings of a class a command offers. The
flag, help, metavar and default come from the field's declaration, so a setting is written once. No torch here.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from typing import Annotated

import typer

from ..runtime.declare import UNSET, Declared, Use, as_field, as_use, build, declared, mark_given, nested, values_of

__all__ = ["Use", "options_of", "with_settings"]  # Use: the one way to leave a setting out (runtime.declare)


def _as_used(d: Declared, use: Use) -> Declared:
    """``d`` as ``use`` offers it: renamed, with the command's own help."""
    option = d.option
    if (new := use.rename.get(d.name)) is not None:
        option = dataclasses.replace(option, param=new, flag="--" + new.replace("_", "-"))
    if (text := use.helps.get(d.name)) is not None:
        option = dataclasses.replace(option, help=text)
    return d if option is d.option else dataclasses.replace(d, option=option)


def options_of(use: Use) -> list[Declared]:
    """The command-line options of ``use``: its class's declared fields and its nested classes', as offered."""
    out = [_as_used(d, use) for d in declared(use.cls) if d.option.cli and use.offers(d.name)]
    for name, sub in nested(use.cls):
        if name not in use.skip:
            out += options_of(Use(sub, use.skip, use.only))
    return out


def changed(obj, use: Use | type) -> list[Declared]:
    """The options of ``use`` that ``obj`` holds at another value than the command line's default."""
    use = as_use(use)
    values = values_of(obj)
    return [d for d in options_of(use) if d.name in values and values[d.name] != as_field(d, d.command_default)]


def parameter(d: Declared, default=UNSET) -> inspect.Parameter:
    """The Typer parameter of one declared option."""
    o = d.option
    decls = [o.flag] if o.flag else []
    decls += [o.short] if o.short else []
    option = typer.Option(*decls, help=o.help, metavar=o.metavar, rich_help_panel=o.panel)
    annotation = Annotated[o.cli_type or d.type, option]
    value = d.command_default if default is UNSET else default
    return inspect.Parameter(d.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=value)


def build_used(use: Use, values: dict):
    """The object of ``use``'s class that the parsed ``values`` (by option name) describe, validated as it is built
    (a renamed option's messages name the flag the command spells)."""
    return build(use.cls, values, offered=use.offers, rename=use.rename)


def given_on_command_line(names) -> list[str]:
    """The parameters among ``names`` that the command line gave (not a default, nor the ``--config`` file: a file's
    top level may serve several commands and both tasks)."""
    ctx = _current_context()
    if ctx is None:
        return []
    return [n for n in names if getattr(ctx.get_parameter_source(n), "name", None) == "COMMANDLINE"]


def _current_context():
    """The running command's click context: typer's own click (recent typer vendors it), else click's."""
    for module in ("typer._click.globals", "click.globals"):
        try:
            return importlib.import_module(module).get_current_context(silent=True)
        except ImportError:
            continue
    return None


def with_settings(**groups: Use | type):
    """``command(own…, *, group=object…)`` as a Typer command taking its own parameters, then each group's."""
    groups = {k: as_use(v) for k, v in groups.items()}

    def decorate(command):
        own = [p for name, p in inspect.signature(command, eval_str=True).parameters.items() if name not in groups]
        own_names = frozenset(p.name for p in own)
        taken = set(own_names)
        shared, names = [], {}
        for key, use in groups.items():
            # A name the command takes itself is its own (bench's --align: the laya-aligned head's λ), not the group's
            names[key] = [d.name for d in options_of(use) if d.name not in own_names]
            for d in options_of(use):
                if d.name not in taken:
                    shared.append(parameter(d, use.defaults.get(d.name, UNSET)))
                    taken.add(d.name)

        @functools.wraps(command)
        def run(**values):
            built = {key: build_used(use, {n: values[n] for n in names[key]}) for key, use in groups.items()}
            flags = given_on_command_line(values)
            for obj in built.values():
                mark_given(obj, flags)  # an option of the other task given at its default is refused too
            return command(**{p.name: values[p.name] for p in own}, **built)

        positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p not in positional]
        run.__signature__ = inspect.Signature(positional + rest + shared)
        run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}
        del run.__wrapped__  # Typer reads the signature above, not the command's
        return run

    return decorate
