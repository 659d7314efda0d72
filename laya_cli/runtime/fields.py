"""A setting declared once: a dataclass field that carries its command-line option and its checks.

    steps: int = setting(32, "Integrated Gradients: the most steps per sample.", minimum=1)

``setting`` is a ``dataclasses.field`` whose metadata holds an ``Option``. From it the command line builds its
Typer options (``cli/declared.py``: flag, help, metavar, the default), the Python API takes the same names as
keywords (``settings_of``, ``build``), ``check_fields`` applies the declared checks in ``validate()`` (a number
finite and within its bounds, a choice in its canonical spelling) and the docs' option tables are written from
it (``tools/option_tables.py``). What involves several fields stays in the dataclass's ``validate()``. No
torch and no typer here: the gates and ``laya --help`` read these without either.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import types
import typing
from dataclasses import dataclass

from .errors import LayaError, match_choice


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # "not given": the command line's default is the field's; a setting without a default


@dataclass(frozen=True)
class Option:
    """What the command line and the checks know of one field (all but ``help`` optional)."""

    help: str
    param: str | None = None  # the command's parameter name where it is not the field's (DataRequest.name: dataset)
    flag: str | None = None  # the long flag (default --param-name); "--x/--no-x" for a switch that can be negated
    short: str | None = None  # a one-letter alias, e.g. "-q"
    metavar: str | None = None
    choices: tuple[str, ...] = ()  # case-insensitive; stored in the spelling given here
    minimum: float | None = None  # numbers: at least this
    above: float | None = None  # numbers: greater than this
    below: float | None = None  # numbers: less than this
    rule: str | None = None  # how the bounds read in a message ("0 (off) or positive"); default: from the bounds
    cli: bool = True  # False: a setting of the Python API and the checkpoint only (set by the job, not a flag)
    command_default: object = UNSET  # the command line's default where it is not the field's (device: auto)
    cli_type: object = None  # what the flag parses to where the field holds something else (a comma list: str)
    api: bool = True  # False: a command-line option only (where the file is written, how it is shown)

    def name(self, field_name: str) -> str:
        return self.param or field_name

    def long_flag(self, field_name: str) -> str:
        return (self.flag or "--" + self.name(field_name).replace("_", "-")).split("/")[0]

    def bounds(self) -> str | None:
        """The declared bounds as words: 'positive', 'at least 1', 'in [0, 1)'."""
        if self.rule is not None:
            return self.rule
        low = (
            None
            if self.minimum is None and self.above is None
            else (f"[{self.minimum:g}" if self.minimum is not None else f"({self.above:g}")
        )
        if low is not None and self.below is not None:
            return f"in {low}, {self.below:g})"
        if self.above == 0:
            return "positive"
        if self.above is not None:
            return f"greater than {self.above:g}"
        if self.minimum is not None:
            return f"at least {self.minimum:g}"
        return f"less than {self.below:g}" if self.below is not None else None


def setting(default=UNSET, help: str = "", *, factory=UNSET, **option) -> typing.Any:
    """A dataclass field with its ``Option`` (``factory`` for a mutable default)."""
    meta = {"option": Option(help, **option)}
    if factory is not UNSET:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if default is UNSET:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Declared:
    """One declared field of a settings class: its name, resolved type, default and option."""

    field: str
    type: object
    default: object
    option: Option

    @property
    def name(self) -> str:
        """The option's parameter name (the command line's and the API's keyword)."""
        return self.option.name(self.field)

    @property
    def flag(self) -> str:
        return self.option.long_flag(self.field)

    @property
    def command_default(self):
        return self.default if self.option.command_default is UNSET else self.option.command_default


def declared(cls) -> list[Declared]:
    """The declared fields of a settings dataclass, in declaration order (fields without an Option are left out)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        option = f.metadata.get("option")
        if option is None:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append(Declared(f.name, hints[f.name], default, option))
    return out


def declared_setting(cls, name: str) -> Declared:
    """The declared setting of ``cls`` an option name stands for."""
    return next(d for d in declared(cls) if d.name == name)


def help_of(cls, name: str) -> str:
    """The declared help of one setting (for a command-line option that shares it without being built from it)."""
    return declared_setting(cls, name).option.help


def settings_of(*classes, api: bool = True) -> list[str]:
    """Every keyword these settings classes take (``api``: those the Python API takes), in order."""
    return [d.name for cls in classes for d in declared(cls) if d.option.api or not api]


def build(cls, values: dict, **fixed):
    """``cls`` from keyword values given by their option names (``values`` may hold others': they are left);
    ``fixed``: fields set by the caller whatever ``values`` holds."""
    names = {d.name: d.field for d in declared(cls)}
    kwargs = {names[k]: v for k, v in values.items() if k in names and names[k] not in fixed}
    return cls(**kwargs, **fixed)


def refuse_unknown(given, known, what: str) -> None:
    """One line naming each keyword that is not a setting of ``what``, with the closest known ones."""
    unknown = [k for k in given if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise LayaError(f"{what} takes no setting {', '.join(map(repr, unknown))}{hint}")


def check_fields(obj) -> None:
    """Apply each declared field's checks to ``obj`` in place: its type, a finite number within its bounds, a
    choice in its canonical spelling. None passes where the field may be None."""
    for d in declared(type(obj)):
        value = getattr(obj, d.field)
        if value is None:
            continue
        setattr(obj, d.field, check_value(d, value))


def _allows(kind: type, tp) -> bool:
    """``tp`` is ``kind`` or a union holding it (``int | None``)."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    return tp is kind or (union and kind in typing.get_args(tp))


def check_value(d: Declared, value):
    """``value`` for the field ``d``, checked (one LayaError line naming the flag otherwise)."""
    option, flag = d.option, d.flag
    if _allows(bool, d.type):
        if not isinstance(value, bool):
            raise LayaError(f"{flag} is a switch (true or false), got {value!r}")
        return value
    if _allows(int, d.type) or _allows(float, d.type):
        return _check_number(d, value)
    if option.choices:
        return match_choice(flag, value, option.choices)
    return value


def _check_number(d: Declared, value):
    option, flag, whole = d.option, d.flag, not _allows(float, d.type)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not float(value).is_integer()):
        kind = "a whole number" if whole else "a number"
        raise LayaError(f"{flag} must be {kind}, got {value!r}")
    rule = option.bounds()
    if not math.isfinite(value):
        raise LayaError(f"{flag} must be {rule + ' and finite' if rule else 'a finite number'}, got {value}")
    low_ok = (option.minimum is None or value >= option.minimum) and (option.above is None or value > option.above)
    if not low_ok or (option.below is not None and not value < option.below):
        raise LayaError(f"{flag} must be {rule}, got {value}")
    return int(value) if whole else value


def _type_name(tp) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def takes_settings(*classes, skip: tuple[str, ...] = (), defaults: dict | None = None):
    """``fn(…, **settings)`` taking every API setting declared on ``classes`` as a keyword (``skip``: those it does
    not take; ``defaults``: its own default of a name): ``help()`` and ``inspect`` show each with its default, the
    docstring lists them with their declared help, ``fn`` receives all of them, and a keyword that is no setting is
    one LayaError line with the closest names."""
    defaults = defaults or {}
    taken = [d for cls in classes for d in declared(cls) if d.option.api and d.name not in skip]
    known = {d.name: defaults.get(d.name, d.default) for d in taken}

    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        extra = [
            inspect.Parameter(
                d.name, inspect.Parameter.KEYWORD_ONLY, default=known[d.name], annotation=_type_name(d.type)
            )
            for d in taken
        ]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            given = {k: kwargs.pop(k) for k in list(kwargs) if k in known}
            refuse_unknown([k for k in kwargs if k not in sig.parameters], [*known, *sig.parameters], fn.__name__)
            return fn(*args, **kwargs, **{**known, **given})

        call.__signature__ = sig.replace(parameters=own + extra)
        lines = [f"        {d.name}: {d.option.help} (``{d.flag}``)" for d in taken]
        call.__doc__ = (fn.__doc__ or "").rstrip() + (
            "\n\n    Settings (keywords; the command line's options of the same name, declared in runtime/config.py):\n"
            + "\n".join(lines)
            + "\n"
        )
        return call

    return decorate
