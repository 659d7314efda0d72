"""The shape of a JSON document laya reads back (an attached audit or depth result): each field checked by type,
before anything is drawn from it, so a file with the right keys and the wrong values (a script where a count
belongs, a skeleton without its tables) is one line naming the field, never a KeyError or markup in a report.

A shape is written with plain Python values:

- a type or a tuple of types (``str``, ``NUM``, ``(str, NONE)``): the value is one of them (a bool is no number);
- a tuple of shapes (``([NUM], NONE)``): the value has one of them;
- ``[shape]``: a list whose every item has ``shape``;
- ``{"key": shape, ...}``: a dict that has every key (``Optional(shape)``: may be absent; other keys are free);
- ``Each(shape, keys=pattern)``: a dict whose every value has ``shape`` (and every key matches ``pattern``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NUM = (int, float)
NONE = type(None)


@dataclass(frozen=True)
class Optional:
    shape: Any


@dataclass(frozen=True)
class Each:
    shape: Any
    keys: str | None = None  # a pattern every key must match whole (a key written out as a name: an option's)


def _type_name(shape) -> str:
    types = shape if isinstance(shape, tuple) else (shape,)
    names = {int: "a number", float: "a number", str: "a text", bool: "true/false", NONE: "null"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def _matches(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def shape_error(value, shape, where: str = "") -> str | None:
    """Where ``value`` first departs from ``shape`` ('verdict.checks is a text, not a number'), or None."""
    if isinstance(shape, Optional):
        return shape_error(value, shape.shape, where)
    if isinstance(shape, tuple) and not all(isinstance(t, type) for t in shape):  # alternatives: one must fit
        errors = [shape_error(value, alt, where) for alt in shape]
        return None if None in errors else next(e for e in errors if not e.endswith(", not null"))
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where or 'the document'} is not a list"
        return next((e for i, v in enumerate(value) if (e := shape_error(v, shape[0], f"{where}[{i}]"))), None)
    if isinstance(shape, (dict, Each)):
        if not isinstance(value, dict):
            return f"{where or 'the document'} is not an object"
        if isinstance(shape, Each):
            if shape.keys and (bad := next((k for k in value if not re.fullmatch(shape.keys, k)), None)) is not None:
                return f"{where or 'the document'} has a key that is no name ({bad!r})"
            items = [(k, v, shape.shape) for k, v in value.items()]
        else:
            missing = [k for k, s in shape.items() if k not in value and not isinstance(s, Optional)]
            if missing:
                return f"{_join(where, missing[0])} is missing"
            items = [(k, value[k], s) for k, s in shape.items() if k in value]
        return next((e for k, v, s in items if (e := shape_error(v, s, _join(where, k)))), None)
    if not _matches(value, shape):
        return f"{where} is {_type_name(type(value))}, not {_type_name(shape)}"
    return None


def _join(where: str, key) -> str:
    return f"{where}.{key}" if where else str(key)
