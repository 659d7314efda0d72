"""TOML in and out, for ``--config FILE`` and ``laya info --options-toml``: read with the standard library
(``tomllib``; ``tomli``, its backport, on Python 3.10), written by ``to_toml`` for the few value types an
option takes (strings, numbers, booleans, lists of them), so a written file reads back to equal values."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .errors import LayaError


def read_toml(path: str | Path) -> dict:
    """The document in ``path``; a missing, unreadable or malformed file is one ``LayaError`` line."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    path = Path(path).expanduser()
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise LayaError(f"--config {path}: no such file") from None
    except OSError as e:
        raise LayaError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError as e:  # TOML is UTF-8: a file in another encoding, or not text at all
        where = f"byte 0x{e.object[e.start]:02x} at offset {e.start}"
        raise LayaError(f"--config {path}: not UTF-8 text ({where}); a TOML file is UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise LayaError(f"--config {path}: not valid TOML ({e})") from None


def toml_value(value) -> str:
    """One value as TOML writes it: floats by their shortest round-tripping repr, strings JSON-escaped (a TOML
    basic string takes the same escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def toml_table(name: str, values: dict, commented: tuple[str, ...] = (), note: str = "") -> str:
    """``[name]`` and one ``key = value`` line per value (None is left out: TOML has no null, and an option
    left out keeps its default, which is None wherever None can be given); keys in ``commented`` are written
    commented out, with ``note`` after them."""
    lines = [f"[{name}]"]
    for key, value in values.items():
        if value is None:
            continue
        line = f"{key} = {toml_value(value)}"
        lines.append(f"# {line}  {note}".rstrip() if key in commented else line)
    return "\n".join(lines) + "\n"
