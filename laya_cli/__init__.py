"""laya: layer-attribution auditing with LAYA heads.

The public Python API is ``__all__`` (docs/api.md); everything else is internal::

    import laya_cli
    tapped = laya_cli.attach(model)                       # any nn.Module: the taps laya train chooses
    laya_model = laya_cli.fit(tapped, train_loader)       # your DataLoaders of (images, labels)
    result = laya_cli.audit(laya_model, test_loader)      # .summary, .to_pandas(), .per_sample()
    exp = laya_cli.export(laya_model, test_loader)        # .table, .profiles, .shift (DataFrames)
    deep = laya_cli.depth(laya_model, test_loader)        # .to_pandas(): accuracy and compute per depth k
    laya_model.save("model.pt")                           # laya info / audit / export read it
    laya_model = laya_cli.load("model.pt")

Importing the package is cheap: names load their module (and torch) on first use, so that
``laya --help`` starts without importing torch.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__version__ = "0.1.0"

# The public API: name -> module that defines it (relative to this package).
_EXPORTS = {
    "attach": "api", "fit": "api", "audit": "api", "export": "api", "load": "api", "depth": "api",
    "Tapped": "api", "LayaModel": "model", "AuditResult": "auditing", "Export": "exporting",
    "DepthResult": "depthing",
    "LayaError": "errors",
}
__all__ = sorted(_EXPORTS)

# Names this package exported before it had a documented API: still importable (with a
# DeprecationWarning naming their home), but internal; they will be removed.
_MOVED = {
    "HeadConfig": "config", "TrainConfig": "config", "DataRequest": "config", "TrainRequest": "config",
    "AuditSettings": "config",
    "BackboneSpec": "backbones", "TappedBackbone": "backbones", "build_backbone": "backbones",
    "load_model": "model", "read_checkpoint": "checkpoint", "save_checkpoint": "checkpoint",
    "load_dataset": "data",
    "HEADS": "heads", "HeadOutput": "heads", "LAYAHead": "heads", "build_head": "heads",
    "check_thresholds": "auditing", "parse_methods": "auditing", "parse_thresholds": "auditing",
    "run_audit": "auditing",
    "load_eval_data": "evaldata",
    "threshold_checks": "auditing", "read_audit_json": "regression", "parse_max_drop": "regression", "junit_xml": "junit",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _MOVED:
        home = f"{__name__}.{_MOVED[name]}"
        warnings.warn(f"{__name__}.{name} is internal and will be removed from the package namespace; "
                      f"use the public API (docs/api.md) or import it from {home}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
