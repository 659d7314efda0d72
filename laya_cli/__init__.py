"""laya: layer-attribution auditing with LAYA heads.

Importing the package is cheap: names load their module (and torch) on first use, so that
``laya --help`` starts without importing torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> module that defines it (relative to this package)
_EXPORTS = {
    "LayaError": "errors",
    "HeadConfig": "config", "TrainConfig": "config", "DataRequest": "config", "TrainRequest": "config",
    "AuditSettings": "config",
    "BackboneSpec": "backbones", "TappedBackbone": "backbones", "build_backbone": "backbones",
    "load_model": "checkpoint", "read_checkpoint": "checkpoint", "save_checkpoint": "checkpoint",
    "load_dataset": "data",
    "HEADS": "heads", "HeadOutput": "heads", "LAYAHead": "heads", "build_head": "heads",
    "LayaModel": "model",
    "check_thresholds": "auditing", "parse_methods": "auditing", "parse_thresholds": "auditing",
    "run_audit": "auditing",
    "load_eval_data": "evaldata",
    "threshold_checks": "auditing", "read_audit_json": "regression", "parse_max_drop": "regression", "junit_xml": "junit",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
