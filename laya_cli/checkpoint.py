"""The checkpoint format: one file, plain containers and tensors, weights_only-loadable.

Layout (``format_version`` 1), documented in docs/checkpoint.md:
  format, format_version, versions{torch,timm,laya}, backbone{spec..., weights, input},
  layers, dims, head{kind, config, weights}, classes, dataset{...}, reference[L tensors],
  history[...], metrics{...}, train_config{...}
"""

from __future__ import annotations

from pathlib import Path

import torch

from .backbones import BackboneSpec, backbone_from_checkpoint
from .errors import LayaError
from .config import HeadConfig
from .fileio import atomic_torch_save
from .heads import build_head
from .model import LayaModel
from .trust import safe_torch_load

FORMAT = "laya-checkpoint"
FORMAT_VERSION = 1


def versions() -> dict:
    import timm

    from . import __version__

    return {"torch": str(torch.__version__), "timm": str(timm.__version__), "laya": __version__}


def save_checkpoint(ckpt: dict, path: str | Path) -> None:
    ckpt = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": versions(), **ckpt}
    atomic_torch_save(ckpt, path)


def read_checkpoint(path: str | Path) -> dict:
    """Load and validate a checkpoint dict. Never unpickles code (weights_only=True)."""
    path = Path(path).expanduser()
    ckpt = safe_torch_load(path, "checkpoint")
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise LayaError(f"{path} is not a laya checkpoint (no '{FORMAT}' marker)")
    version = ckpt.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise LayaError(
            f"{path} has checkpoint format version {version}; this laya reads up to {FORMAT_VERSION} — upgrade laya"
        )
    return ckpt


def model_from_checkpoint(ckpt: dict) -> LayaModel:
    spec = BackboneSpec.from_dict(ckpt["backbone"]["spec"])
    try:
        backbone = backbone_from_checkpoint(ckpt["backbone"])  # refuses weights whose SHA-256 changed
        head = build_head(ckpt["head"]["kind"], ckpt["dims"], len(ckpt["classes"]), HeadConfig(**ckpt["head"]["config"]))
        head.load_state_dict(ckpt["head"]["weights"])
    except LayaError:
        raise
    except (KeyError, RuntimeError, TypeError) as e:
        raise LayaError(f"checkpoint is inconsistent: {str(e).splitlines()[0][:160]}") from None
    model = LayaModel(backbone, head, spec, ckpt["head"]["kind"], list(ckpt["classes"]),
                      [r.float() for r in ckpt["reference"]], ckpt)
    return model.eval()


def load_model(path: str | Path) -> LayaModel:
    return model_from_checkpoint(read_checkpoint(path))


def checkpoint_summary(ckpt: dict) -> dict:
    """The JSON shape of ``laya info`` (documented in docs/checkpoint.md)."""
    spec = ckpt["backbone"]["spec"]
    return {
        "format_version": ckpt["format_version"],
        "versions": ckpt["versions"],
        "head": {"kind": ckpt["head"]["kind"], "config": ckpt["head"]["config"]},
        "backbone": {"name": spec["name"], "pretrained": spec["pretrained"], "finetune": spec["finetune"],
                     "pool": spec["pool"], "weights_in_file": ckpt["backbone"]["weights"] is not None,
                     # where the weights came from, their SHA-256, each tap's layout (docs/backbones.md)
                     "weights_source": ckpt["backbone"].get("source"), "weights_sha256": ckpt["backbone"].get("sha256"),
                     "formats": list(ckpt["backbone"].get("formats") or spec.get("formats") or []),
                     # parameters stored in the file (None when the weights load by name)
                     "parameters": (sum(int(t.numel()) for t in ckpt["backbone"]["weights"].values()
                                        if t.is_floating_point()) if ckpt["backbone"]["weights"] is not None else None)},
        "layers": list(ckpt["layers"]),
        "dims": list(ckpt["dims"]),
        "classes": list(ckpt["classes"]),
        "dataset": ckpt["dataset"],
        "metrics": ckpt["metrics"],
        "train_config": ckpt.get("train_config", {}),
        "epochs": len(ckpt.get("history", [])),
        "truncated": ckpt.get("truncated"),  # laya depth --truncate: cut after which tap (docs/depth.md)
    }
