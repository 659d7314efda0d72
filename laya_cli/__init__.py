"""laya: layer-attribution auditing with LAYA heads.

The public Python API is ``__all__`` (docs/api.md); everything else is internal::

    import laya_cli
    tapped = laya_cli.attach(model)                       # any nn.Module: the taps laya train chooses
    laya_model = laya_cli.fit(tapped, train_loader)       # your DataLoaders of (images, labels)
    result = laya_cli.audit(laya_model, test_loader)      # .summary, .to_pandas(), .per_sample()
    exp = laya_cli.export(laya_model, test_loader)        # .table, .profiles, .shift (DataFrames)
    deep = laya_cli.depth(laya_model, test_loader)        # .to_pandas(): accuracy and compute per depth k
    change = laya_cli.diff(laya_model, other, test_loader)  # laya diff: what changed, class by class
    laya_model.save("model.pt")                           # laya info / audit / export read it
    laya_model = laya_cli.load("model.pt")

    lm = laya_cli.fit("hf:./my-gpt", "text:./corpus", task="lm")  # a language model's heads, per token
    laya_cli.audit(lm); laya_cli.depth(lm); laya_cli.export(lm)   # on the held-out text it was trained with

Importing the package is cheap: names load their module (and torch) on first use, so that
``laya --help`` starts without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# The public API: name -> module that defines it (relative to this package).
_EXPORTS = {
    "attach": "api",
    "fit": "api",
    "audit": "api",
    "export": "api",
    "load": "api",
    "depth": "api",
    "diff": "api",
    "Tapped": "api",
    "LayaModel": "model.laya_model",
    "LayaLM": "model.lm_heads",
    "TokenExitResult": "depthing.lm_exit",
    "TokenExport": "exporting.lm",
    "AuditResult": "auditing.results",
    "Export": "exporting.folder",
    "DepthResult": "depthing.analysis",
    "DiffResult": "auditing.diff.compare",
    "LayaError": "runtime.errors",
    "LayaWarning": "runtime.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """A public name, loaded with its module on first use (and kept, so later lookups skip this)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
