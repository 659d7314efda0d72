"""Your own architecture: ``--arch module.path:callable`` or ``--arch path/to/file.py:callable``.

Importing a module runs its code. laya does it only for code you name yourself on the command
line (``--arch`` on ``train``, and again on ``audit``/``export``) or in the library
(``trust_code``) — as torch.hub does with ``trust_repo``. A checkpoint that names an
architecture never imports it on its own: a checkpoint can come from a stranger.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from torch import nn

from ..runtime.errors import LayaError

_trusted: set[str] = set()


def normalize_ref(ref: str) -> str:
    """``module.path:callable`` as is; ``file.py:callable`` with the file's absolute path."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise LayaError(f"--arch {ref}: expected module.path:callable or path/to/file.py:callable")
    if _is_file(target):
        target = str(Path(target).expanduser().resolve())
    return f"{target}:{attr}"


def _is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def trust_code(ref: str) -> str:
    """Allow this process to import the code ``ref`` names (what ``--arch`` does)."""
    ref = normalize_ref(ref)
    _trusted.add(ref)
    return ref


def is_trusted(ref: str) -> bool:
    return normalize_ref(ref) in _trusted


def forget_trusted() -> None:
    """Take back every ``trust_code`` of this process: it trusts no code again, as a new process does."""
    _trusted.clear()


def build_user_module(ref: str) -> nn.Module:
    """Import ``ref`` and call it with no arguments; every failure is one line."""
    ref = normalize_ref(ref)
    if ref not in _trusted:
        raise LayaError(
            f"this model's architecture is your own code ({ref}); laya imports code only when you name "
            f"it: add --arch {ref}"
        )
    target, _, attr = ref.rpartition(":")
    module = _import(target)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LayaError(f"--arch {ref}: {target} has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LayaError(f"--arch {ref}: {attr} is a {type(obj).__name__}, not a callable that builds a model")
    try:
        model = obj()
    except Exception as e:
        detail = (str(e).strip().splitlines() or [""])[0][:160]
        raise LayaError(f"--arch {ref}: calling {attr}() raised {type(e).__name__}: {detail}") from None
    if not isinstance(model, nn.Module):
        raise LayaError(f"--arch {ref}: {attr}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _import(target: str):
    try:
        if _is_file(target):
            path = Path(target)
            if not path.is_file():
                raise LayaError(f"--arch: file not found: {path}")
            name = "laya_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
            return module
        return importlib.import_module(target)
    except LayaError:
        raise
    except (Exception, SystemExit) as e:
        detail = (str(e).strip().splitlines() or [""])[0][:160]
        raise LayaError(f"--arch: cannot import {target}: {type(e).__name__}: {detail}") from None
