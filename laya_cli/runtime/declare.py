"""How a setting is declared: a dataclass field that carries its command-line option and its checks.

    steps: int = setting(32, "Integrated Gradients: the most steps per sample.", minimum=1)

``setting`` is a ``dataclasses.field`` whose metadata holds an ``Option``. Each stage declares its own settings
with it (``model/settings.py``, ``data/settings.py``, ``training/settings.py``, ``auditing/settings.py``, …); from
the declarations the command line builds its Typer options (``cli/declared.py``: flag, help, metavar, the default),
the Python API takes the same names as keywords (``takes_settings``, ``build``), ``check_fields`` applies the
declared checks in ``validate()`` (a number finite and within its bounds, a choice in its canonical spelling),
which a ``Settings`` class runs when it is built: a settings object is valid from birth and frozen after
(``evolve`` makes a changed copy, validated the same way). ``Use`` is the one way an entry point (a command, an
API function) says which settings of a class it offers, its own defaults and spellings;
``refuse_other_task`` refuses a setting of one task given to the other, and the docs' option tables are written
from them (``tools/option_tables.py``). What involves several fields stays in the dataclass's ``validate()``.
The generic checks of single values (``check_at_least``, ``split_csv``, ``check_unit_interval``) are here too.
No torch and no typer here: the gates and ``laya --help`` read these without either.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import os
import re
import sys
import types
import typing
from contextvars import ContextVar
from dataclasses import dataclass, field

from .errors import LayaError, match_choice

# The largest numbers the code can hold and that still mean something (issue 66): a whole number past these is
# refused in one line before any work, never an overflow deep inside torch or numpy.
INT64_MAX = 2**63 - 1  # what torch and numpy hold: the ceiling of every whole number, declared or not
SEED_MAX = 2**32 - 1  # a seed (numpy's legacy and torch's generators take it; seed + k, + 7919·epoch stay in int64)
COUNT_MAX = 10**12  # counts where more than there are means all (samples, tokens): a larger one means no more
STEPS_MAX = 10**6  # epochs, patience, IG steps, resamples, permutations, repeats, draws: beyond, no run ends
WIDTH_MAX = 2**20  # widths and sides (d*, hidden units, image sides, tokens per block, layers dropped)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # "not given": the command line's default is the field's; a setting without a default


@dataclass(frozen=True)
class Option:
    """What the command line and the checks know of one field (all but ``help`` optional)."""

    help: str
    param: str | None = None  # the command's parameter name where it is not the field's (DataSettings.name: dataset)
    flag: str | None = None  # the long flag (default --param-name); "--x/--no-x" for a switch that can be negated
    short: str | None = None  # a one-letter alias, e.g. "-q"
    metavar: str | None = None
    choices: tuple[str, ...] = ()  # case-insensitive; stored in the spelling given here
    resolved: str | None = None  # a regex of values a resolving step stores beside the choices (cuda:1, a device)
    minimum: float | None = None  # numbers: at least this
    above: float | None = None  # numbers: greater than this
    below: float | None = None  # numbers: less than this
    maximum: float | None = None  # numbers: at most this (every whole number declares one; INT64_MAX bounds the rest)
    rule: str | None = None  # how the bounds (or the choices) read in a message ("0 (off) or positive")
    cli: bool = True  # False: set by the job and recorded in the checkpoint, never a flag nor a keyword
    command_default: object = UNSET  # the command line's default where it is not the field's (device: auto)
    cli_type: object = None  # what the flag parses to where the field holds something else (a comma list: str)
    task: str | None = None  # the one task that reads it ("classify" or "lm"); None: both
    panel: str | None = None  # where --help lists it (default: its class's PANEL; ``help_panels``)

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


@functools.cache
def declared(cls) -> tuple[Declared, ...]:
    """The declared fields of a settings dataclass, in declaration order (fields without an Option are left out);
    an option without a panel of its own is listed in its class's (``PANEL``). Read once per class: a class's
    fields do not change, and resolving its type hints each time was most of a settings object's checks (every
    object built, every ``evolve``)."""
    hints = typing.get_type_hints(cls)
    panel = getattr(cls, "PANEL", None)
    out = []
    for f in dataclasses.fields(cls):
        option = f.metadata.get("option")
        if option is None:
            continue
        if option.panel is None and panel is not None:
            option = dataclasses.replace(option, panel=panel)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append(Declared(f.name, hints[f.name], default, option))
    return tuple(out)


def declared_setting(cls, name: str) -> Declared:
    """The declared setting of ``cls`` an option name stands for."""
    return next(d for d in declared(cls) if d.name == name)


def help_of(cls, name: str) -> str:
    """The declared help of one setting (for a command-line option that shares it without being built from it)."""
    return declared_setting(cls, name).option.help


@dataclass(frozen=True)
class Use:
    """A settings class as one entry point (a command, an API function) takes it — the one way to leave a setting
    out: ``skip`` names (and nested fields) it does not offer, or ``only`` those it offers; ``defaults`` its own
    default of a name; ``rename`` a name it spells otherwise (bench's ``seed`` of the audit: ``audit_seed``, flag
    ``--audit-seed``); ``helps`` its own help of a name."""

    cls: type
    skip: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    defaults: dict = field(default_factory=dict)
    rename: dict = field(default_factory=dict)
    helps: dict = field(default_factory=dict)

    def offers(self, name: str) -> bool:
        return name not in self.skip and (self.only is None or name in self.only)


def as_use(use) -> Use:
    """A settings class taken whole, or the ``Use`` given."""
    return use if isinstance(use, Use) else Use(use)


def nested(cls) -> list[tuple[str, type]]:
    """The fields of ``cls`` that hold another settings dataclass (TrainJobSettings.head_config, .data, .train)."""
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])]


def build(cls, values: dict, *, offered=None, rename: dict | None = None, **fixed):
    """``cls`` from values given by their option names, its nested settings classes built from the same values
    (``values`` may hold others': they are left); ``fixed``: fields set by the caller whatever ``values`` holds.
    ``offered(name)``: whether the caller offers that setting (``Use.offers``); ``rename``: the names a caller
    spells otherwise (bench's ``audit_seed`` for the audit's ``seed``): the messages of the checks run while it is
    built name those flags (``mark_flags``)."""
    rename = rename or {}
    kwargs = {}
    for d in declared(cls):
        name = rename.get(d.name, d.name)
        if name in values and d.field not in fixed and (offered is None or offered(d.name)):
            kwargs[d.field] = as_field(d, values[name])
    for name, sub in nested(cls):
        if name not in fixed and (offered is None or offered(name)):
            kwargs[name] = build(sub, values, offered=offered)
    flags = {name: "--" + new.replace("_", "-") for name, new in rename.items()}
    with _spelled(flags):
        obj = cls(**kwargs, **fixed)
    if flags:
        mark_flags(obj, flags)
    return obj


class Settings:
    """What a settings dataclass (``@dataclass(frozen=True)``) shares: building it runs ``validate`` (the declared
    checks, ``check_fields``, then the class's own across fields), so an object that exists is valid; nothing
    changes it afterwards: a step that needs another value makes a new object (``evolve``)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self):
        check_fields(self)
        return self


def evolve(obj, **changes):
    """A copy of the settings object ``obj`` with ``changes``, validated as it is built (the flags its caller spells
    and the options given explicitly are carried over: ``mark_flags``, ``mark_given``)."""
    with _spelled(getattr(obj, FLAGS, {})):
        new = dataclasses.replace(obj, **changes)
    for mark in (FLAGS, GIVEN):
        if hasattr(obj, mark):
            object.__setattr__(new, mark, getattr(obj, mark))
    return new


def normalise(obj, **values) -> None:
    """Store a field's canonical form (a choice's spelling, a comma list's items) while ``obj`` is being validated:
    the one write a frozen settings object takes, and only of the value it already holds in another spelling."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


def as_field(d: Declared, value):
    """A value as the field holds it (a path given for a text field: its text)."""
    return str(value) if isinstance(value, os.PathLike) and d.type in (str, str | None) else value


def values_of(obj) -> dict:
    """The declared settings of ``obj`` (and of its nested settings objects) by option name."""
    out = {d.name: getattr(obj, d.field) for d in declared(type(obj))}
    for name, _ in nested(type(obj)):
        out.update(values_of(getattr(obj, name)))
    return out


GIVEN = "_laya_given"  # the attribute mark_given sets: the option names a caller gave explicitly
FLAGS = "_laya_flags"  # the attribute mark_flags sets: the flags a caller spells otherwise, by option name
# The flags of the object being built (``build``, ``evolve``): its checks run before ``mark_flags`` can mark it.
_SPELLING: ContextVar[dict | None] = ContextVar("laya_spelling", default=None)


class _spelled:
    """``with _spelled(flags):`` the checks of the objects built inside name ``flags`` (by option name)."""

    def __init__(self, flags: dict):
        self.flags = flags

    def __enter__(self):
        self.token = _SPELLING.set(self.flags)

    def __exit__(self, *exc):
        _SPELLING.reset(self.token)


def mark_flags(obj, flags: dict[str, str]) -> None:
    """Record on ``obj`` the flags its caller spells some of its options with (``laya bench``'s ``--audit-seed`` for
    the audit's ``--seed``): ``check_fields`` names those in its messages."""
    object.__setattr__(obj, FLAGS, dict(flags))


def mark_given(obj, names) -> None:
    """Record on ``obj`` (and on its nested settings objects) which of its options the caller gave explicitly (the
    command line's flags): a setting of the other task spelled at its default is then refused too
    (``refuse_other_task``), not only one set to another value."""
    own = {d.name for d in declared(type(obj))}
    object.__setattr__(obj, GIVEN, frozenset(own & set(names)))
    for name, _ in nested(type(obj)):
        mark_given(getattr(obj, name), names)


def other_task_settings(obj, task: str) -> list[str]:
    """The flags of ``obj``'s settings (nested ones too) that only the other task reads and that are set to
    another value than their default, or were given explicitly (``mark_given``): they would be ignored."""
    given = getattr(obj, GIVEN, frozenset())
    out = [
        d.flag
        for d in declared(type(obj))
        if d.option.task not in (None, task)
        and (getattr(obj, d.field) not in (d.default, d.command_default) or d.name in given)
    ]
    return out + [flag for name, _ in nested(type(obj)) for flag in other_task_settings(getattr(obj, name), task)]


TASK_WORDS = {"classify": "classifiers (--task classify)", "lm": "language models (--task lm)"}


def refuse_other_task(obj, task: str) -> None:
    """One line naming each setting of ``obj`` given for the other task (declared with ``task=``): it would be
    ignored. Called by each job once the task is known (the request's, or the checkpoint's)."""
    given = other_task_settings(obj, task)
    if given:
        other = next(t for t in TASK_WORDS if t != task)
        verb = "applies" if len(given) == 1 else "apply"
        raise LayaError(f"{', '.join(given)} only {verb} to {TASK_WORDS[other]}, not to {TASK_WORDS[task]}")


def refuse_unknown(given, known, what: str) -> None:
    """One line naming each keyword that is not a setting of ``what``, with the closest known ones."""
    unknown = [k for k in given if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise LayaError(f"{what} takes no setting {', '.join(map(repr, unknown))}{hint}")


def check_fields(obj) -> None:
    """Apply each declared field's checks to ``obj``: its type, a finite number within its bounds, a choice (kept in
    its canonical spelling: ``normalise``). None passes where the field may be None. A message names the flag the
    caller spelled (``mark_flags``: bench's ``--audit-seed`` for the audit's ``--seed``)."""
    flags = getattr(obj, FLAGS, None) or _SPELLING.get() or {}
    for d in declared(type(obj)):
        value = getattr(obj, d.field)
        if value is None:
            continue
        if d.name in flags:
            d = dataclasses.replace(d, option=dataclasses.replace(d.option, flag=flags[d.name]))
        checked = check_value(d, value)
        if checked is not value:
            normalise(obj, **{d.field: checked})


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
        if option.resolved is not None and isinstance(value, str) and re.fullmatch(option.resolved, value):
            return value  # already resolved (``runtime.device.resolved``): a new object built from a resolved one
        try:
            return match_choice(flag, value, option.choices)
        except LayaError:
            if option.rule is None:
                raise
            raise LayaError(f"{flag} must be {option.rule}, got {value!r}") from None  # as its resolver says it
    return value


def _check_number(d: Declared, value):
    option, flag, whole = d.option, d.flag, not _allows(float, d.type)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not _is_whole(value)):
        kind = "a whole number" if whole else "a number"
        raise LayaError(f"{flag} must be {kind}, got {shown_number(value)}")
    rule, got = option.bounds(), shown_number(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise LayaError(f"{flag} must be {rule + ' and finite' if rule else 'a finite number'}, got {got}")
    low_ok = (option.minimum is None or value >= option.minimum) and (option.above is None or value > option.above)
    if not low_ok or (option.below is not None and not value < option.below):
        raise LayaError(f"{flag} must be {rule}, got {got}")
    # the declared maximum; else what the code holds: an int64, a float64 (a huge int given for a float)
    top = option.maximum if option.maximum is not None else INT64_MAX if whole else sys.float_info.max
    if value > top:
        raise LayaError(
            f"{flag} must be at most {top:,}, got {got}" if whole else f"{flag} must be at most {top:g}, got {got}"
        )
    if value < -(INT64_MAX if whole else sys.float_info.max):
        raise LayaError(f"{flag} is past what the code holds, got {got}")
    return int(value) if whole else value


def _is_whole(value) -> bool:
    """An int, or a float without a fraction (a huge int is never turned into a float: it may not fit one)."""
    return isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())


def shown_number(value) -> str:
    """A number as a message shows it: a very long whole number by its first digits and its length (a 400-digit
    --epochs is not echoed whole)."""
    text = str(value)
    if isinstance(value, int) and not isinstance(value, bool) and len(text.lstrip("-")) > 24:
        return f"{text[: 7 if value < 0 else 6]}… (a {len(text.lstrip('-'))}-digit number)"
    return text if isinstance(value, (int, float)) else repr(value)


def _type_name(tp) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _annotation(d, default) -> str:
    """A setting's type as a signature shows it: ``| None`` where the caller's own default is None (``Use``)."""
    name = _type_name(d.type)
    return f"{name} | None" if default is None and "None" not in name else name


def takes_settings(*uses):
    """``fn(…, **settings)`` taking every setting declared on each class (or ``Use``: those it offers, with its own
    defaults and helps) as a keyword: ``help()`` and ``inspect`` show each with its default, the docstring lists them
    with their help, ``fn`` receives all of them, and a keyword that is no setting is one LayaError line with the
    closest names."""
    uses = [as_use(u) for u in uses]
    taken = [(d, u) for u in uses for d in declared(u.cls) if d.option.cli and u.offers(d.name)]
    known = {d.name: u.defaults.get(d.name, d.default) for d, u in taken}
    helps = {d.name: u.helps.get(d.name, d.option.help) for d, u in taken}
    taken = [d for d, _ in taken]

    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        extra = [
            inspect.Parameter(
                d.name, inspect.Parameter.KEYWORD_ONLY, default=known[d.name], annotation=_annotation(d, known[d.name])
            )
            for d in taken
        ]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            given = {k: kwargs.pop(k) for k in list(kwargs) if k in known}
            refuse_unknown([k for k in kwargs if k not in sig.parameters], [*known, *sig.parameters], fn.__name__)
            return fn(*args, **kwargs, **{**known, **given})

        call.__signature__ = sig.replace(parameters=own + extra)
        lines = [f"        {d.name}: {helps[d.name]} (``{d.flag}``)" for d in taken]
        call.__doc__ = (fn.__doc__ or "").rstrip() + (
            "\n\n    Settings (keywords; the command line's options of the same name, declared by each stage):\n"
            + "\n".join(lines)
            + "\n"
        )
        return call

    return decorate


def check_at_least(option: str, value, minimum: int = 1) -> None:
    """One rule for every count option: ``--samples``, ``--epochs``, ``--batch-size``…"""
    if value is not None and value < minimum:
        raise LayaError(f"{option} must be at least {minimum}, got {value}")


def split_csv(value) -> list[str]:
    """A comma list as its items (a list or tuple is taken as it is; None: none)."""
    if value is None or isinstance(value, (list, tuple)):
        return list(value or [])
    return [v.strip() for v in str(value).split(",") if v.strip()]


def check_unit_interval(option: str, values) -> tuple[float, ...]:
    """Thresholds of a probability-like quantity: each in (0, 1] (a comma list is split), sorted, duplicates
    dropped."""
    out = []
    for v in split_csv(values) if isinstance(values, str) else values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise LayaError(f"{option}: '{v}' is not a number") from None
        if not 0 < f <= 1:
            raise LayaError(f"{option} values must be in (0, 1], got {v}")
        out.append(f)
    if not out:
        raise LayaError(f"{option} needs at least one threshold")
    return tuple(sorted(set(out)))
