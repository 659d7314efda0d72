"""``--config run.toml``: any option of ``laya train|audit|depth|export|bench|diff`` from a TOML file, and the resolved
options a run records (the checkpoint's ``options``, the audit JSON's ``options``).

The file holds ``key = value`` lines at the top level and/or in a table named after the command (``[train]``,
``[audit]``…; the command's table wins over the top level, other commands' tables are skipped, so one file can
describe a whole pipeline). Keys are the long option names (``batch-size`` or ``batch_size``; ``json`` for
``--json``) or the parameter names ``laya info --options-toml`` writes. The file's values become the command's
defaults (click's ``default_map``): flags given on the command line override them. An unknown key or a value of
the wrong type is one line naming the key (exit 2). Nothing here imports more than the standard library.
"""

from __future__ import annotations

from pathlib import Path

from ..runtime.errors import LayaError

# Tables named after these are one command's options; a command reads its own and skips the others'.
COMMANDS = ("train", "audit", "depth", "export", "bench", "diff", "info")
# Options a file cannot set: the file itself, and --help.
NOT_IN_FILE = ("config", "help")
# Not recorded with a run: how it was shown or logged, or continued (a replay starts afresh).
NOT_RECORDED = ("config", "help", "quiet", "verbose", "log_to", "resume", "restart")
# Recorded but written commented out by ``laya info --options-toml``: where the recorded run wrote its output
# (a replay that wrote there would replace it).
OUTPUTS = ("out",)
META_KEY = "laya.config"  # ctx.meta: the file the options came from


def _key(text: str) -> str:
    return text.strip().lstrip("-").replace("-", "_").lower()


def param_keys(params) -> dict[str, object]:
    """Every key a file may use for the command's parameters: the parameter name and its long options."""
    out = {}
    for p in params:
        if p.name in NOT_IN_FILE or getattr(p, "hidden", False):
            continue
        for name in [p.name, *(o for o in [*p.opts, *getattr(p, "secondary_opts", [])] if o.startswith("--"))]:
            if not name.startswith("--no-") or name in p.opts:
                out.setdefault(_key(name), p)
    return out


_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _fits(expected: type, value) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def checked_value(param, key: str, value, path):
    """``value`` for ``param`` as the command takes it, or a ``LayaError`` naming ``key`` and what it needs."""
    from typing import get_args, get_origin

    annotation = param.type_descriptor.annotation
    many = get_origin(annotation) is list
    expected = get_args(annotation)[0] if many else annotation
    expected = str if expected is Path or not isinstance(expected, type) else expected
    if many and isinstance(value, list) and all(_fits(expected, v) for v in value):
        return value
    if _fits(expected, value):
        return [value] if many else (_as_float(key, value, path) if expected is float else value)
    need = _NAMES.get(expected, "a string")
    need = f"{need} or a list of them" if many else need
    raise LayaError(f"--config {path}: '{key}' must be {need}, got {type(value).__name__} {value!r}")


def _as_float(key: str, value, path) -> float:
    """A TOML integer given for a number option, as a float (one too large for a float is one line)."""
    try:
        return float(value)
    except OverflowError:
        raise LayaError(f"--config {path}: '{key}' is too large for a number ({len(str(value))} digits)") from None


def command_table(doc: dict, command: str, path) -> dict:
    """The file's options for ``command``: the top level's plain keys, then its own table over them."""
    top = {k: v for k, v in doc.items() if not (isinstance(v, dict) and k in COMMANDS)}
    own = doc.get(command)
    return {**top, **(own if isinstance(own, dict) else {})}


def load_config(ctx, param, value):
    """The eager ``--config`` callback: read the file, check every key and value against the command's
    parameters, and make them the command's defaults (flags still override them)."""
    if value is None or getattr(ctx, "resilient_parsing", False):
        return value
    from ..runtime.tomlfile import read_toml

    command = ctx.info_name or "laya"
    keys = param_keys(ctx.command.params)
    defaults = {}
    for key, v in command_table(read_toml(value), command, value).items():
        p = keys.get(_key(key))
        if p is None:
            kind = "table" if isinstance(v, dict) else "option"
            raise LayaError(f"--config {value}: unknown {kind} '{key}' for laya {command} (see laya {command} --help)")
        defaults[p.name] = checked_value(p, key, v, value)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[META_KEY] = str(value)
    return value


def _plain(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def recorded_options(ctx) -> dict:
    """The options a command ran with, resolved (defaults, the --config file, then flags), by parameter name,
    as plain JSON values: what a checkpoint and an audit JSON record, what ``--options-toml`` writes back."""
    names = [p.name for p in ctx.command.params if p.name in ctx.params]  # in the order --help lists them
    return {k: _plain(ctx.params[k]) for k in names if k not in NOT_RECORDED}


def options_toml(recorded: dict, source: str = "") -> str:
    """``laya info --options-toml``: a checkpoint's recorded options as a ``--config`` file for the same command."""
    from ..runtime.tomlfile import toml_table

    command = recorded.get("command", "train")
    header = (
        f"# The options of the laya {command} run recorded in {source}; `laya {command} --config FILE` reruns it\n"
        "# (flags given on the command line override the file). Options left out keep their defaults.\n"
    )
    return header + toml_table(
        command, recorded.get("values", {}), OUTPUTS, "(where the recorded run wrote: pass --out)"
    )
