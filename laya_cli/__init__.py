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

from . import _moved

__version__ = "0.1.0"

# The public API: name -> module that defines it (relative to this package).
_EXPORTS = {
    "attach": "api",
    "fit": "api",
    "audit": "api",
    "export": "api",
    "load": "api",
    "depth": "api",
    "Tapped": "api",
    "LayaModel": "model.laya_model",
    "AuditResult": "auditing.run",
    "Export": "exporting.run",
    "DepthResult": "depthing.run",
    "LayaError": "runtime.errors",
}
__all__ = sorted(_EXPORTS)

# Names this package exported before it had a documented API: still importable (with a
# DeprecationWarning naming their home), but internal; they will be removed.
_MOVED = {
    "HeadConfig": "runtime.config",
    "TrainConfig": "runtime.config",
    "DataRequest": "runtime.config",
    "TrainRequest": "runtime.config",
    "AuditSettings": "runtime.config",
    "BackboneSpec": "backbones",
    "TappedBackbone": "backbones",
    "build_backbone": "backbones",
    "load_model": "model.laya_model",
    "read_checkpoint": "model.checkpoint",
    "save_checkpoint": "model.checkpoint",
    "load_dataset": "data.datasets",
    "HEADS": "model.heads",
    "HeadOutput": "model.heads",
    "LAYAHead": "model.heads",
    "build_head": "model.heads",
    "check_thresholds": "gates.thresholds",
    "parse_methods": "auditing.names",
    "parse_thresholds": "gates.thresholds",
    "run_audit": "auditing.run",
    "load_eval_data": "model.evaldata",
    "threshold_checks": "gates.thresholds",
    "read_audit_json": "gates.regression",
    "parse_max_drop": "gates.regression",
    "junit_xml": "gates.junit",
}

__getattr__ = _moved.lazy_exports(__name__, _EXPORTS, _MOVED)
_moved.install()  # old module paths (laya_cli.train, laya_cli.heads, ...) resolve to their new homes


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
