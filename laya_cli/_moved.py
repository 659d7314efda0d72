"""Names and module paths that moved: they keep working, with a DeprecationWarning naming the new home.

Two kinds of old path exist since the package was split into one subpackage per pipeline stage
(docs/architecture.md):

- a module that is gone (``laya_cli.train``): ``MODULES`` maps it to its new module, and an import
  finder hands out that very module object under the old name (``import laya_cli.train`` and
  ``from laya_cli import train`` both work, and ``laya_cli.train is laya_cli.training.loop``);
- a module that became a package of the same name (``laya_cli.auditing``): the package's
  ``__getattr__`` (``moved_names``) resolves the old module's names from their new module.

``lazy_exports`` is the package root's ``__getattr__``: the public API loaded on first use, so that
``import laya_cli`` does not import torch.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable
from typing import Any

PACKAGE = __name__.rpartition(".")[0]

# Old module (relative to the package) -> its module now.
MODULES = {
    "errors": "runtime.errors",
    "config": "runtime.config",
    "device": "runtime.device",
    "distributed": "runtime.distributed",
    "progress": "runtime.progress",
    "fileio": "runtime.fileio",
    "trust": "runtime.trust",
    "images": "data.images",
    "shards": "data.shards",
    "store": "features.store",
    "cache": "features.cache",
    "evaldata": "model.evaldata",
    "heads": "model.heads",
    "checkpoint": "model.checkpoint",
    "train": "training.loop",
    "alignment": "training.alignment",
    "bench": "training.bench",
    "attribution": "auditing.methods",
    "metrics": "auditing.metrics",
    "network": "auditing.network",
    "regression": "gates.regression",
    "junit": "gates.junit",
    "truncation": "depthing.truncation",
    "early_exit": "depthing.early_exit",
    "compute": "depthing.compute",
    "profiles": "exporting.profiles",
    "report_html": "report.html",
    "figures": "report.figures",
    "browser": "report.browser",
    "options": "cli.options",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path will be removed", DeprecationWarning, stacklevel=3)


class _OldModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``laya_cli.<old>`` → the module now at ``MODULES[old]`` (one object under both names)."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, old = fullname.rpartition(".")
        if head == PACKAGE and old in MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def exec_module(self, module) -> None:
        new = f"{PACKAGE}.{MODULES[module.__name__.rpartition('.')[2]]}"
        _warn(module.__name__, new)
        # The import system returns whatever sys.modules holds under the name once this returns.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(f, _OldModules) for f in sys.meta_path):
        sys.meta_path.append(_OldModules())


def moved_names(package: str, *modules: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package that replaced a module of its name: the old module's names,
    now in one of ``modules`` (relative to the package root, first match wins), resolve with a warning."""

    def __getattr__(name: str) -> Any:
        if not name.startswith("__"):
            for module in modules:
                home = importlib.import_module(f"{PACKAGE}.{module}")
                if hasattr(home, name):
                    _warn(f"{package}.{name}", f"{home.__name__}.{name}")
                    return getattr(home, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def lazy_exports(package: str, exports: dict[str, str], moved: dict[str, str]) -> Callable[[str], Any]:
    """The package root's ``__getattr__``: ``exports`` (name -> module) load on first use; ``moved``
    (names the root exported before it had a documented API) resolve with a warning."""
    root = sys.modules[package]

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
            setattr(root, name, value)  # later lookups skip this function
            return value
        if name in moved:
            home = f"{package}.{moved[name]}"
            warnings.warn(
                f"{package}.{name} is internal and will be removed from the package namespace; "
                f"use the public API (docs/api.md) or import it from {home}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(home), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
