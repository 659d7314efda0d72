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
from .fileio import atomic_path
from .heads import HeadConfig, build_head
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
    with atomic_path(path) as tmp:
        torch.save(ckpt, tmp)


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
