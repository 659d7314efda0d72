"""laya: layer-attribution auditing with LAYA heads."""

__version__ = "0.1.0"

from .backbones import BackboneSpec, TappedBackbone, build_backbone  # noqa: E402
from .checkpoint import load_model, read_checkpoint, save_checkpoint  # noqa: E402
from .data import DataRequest, load_dataset  # noqa: E402
from .errors import LayaError  # noqa: E402
from .heads import HEADS, HeadConfig, HeadOutput, LAYAHead, build_head  # noqa: E402
from .model import LayaModel  # noqa: E402
from .audit import AuditSettings, check_thresholds, parse_methods, parse_thresholds, run_audit  # noqa: E402
from .evaldata import load_eval_data  # noqa: E402

__all__ = [
    "BackboneSpec", "TappedBackbone", "build_backbone", "load_model", "read_checkpoint", "save_checkpoint",
    "DataRequest", "load_dataset", "LayaError", "HEADS", "HeadConfig", "HeadOutput", "LAYAHead", "build_head",
    "LayaModel", "AuditSettings", "check_thresholds", "parse_methods", "parse_thresholds", "run_audit",
    "load_eval_data",
]
