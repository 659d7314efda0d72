"""The checkpoint format: one file, plain containers and tensors, weights_only-loadable.

Layout (``format_version`` 1), documented in docs/checkpoint.md:
  format, format_version, versions{torch,timm,laya}, backbone{spec..., weights, input},
  layers, dims, head{kind, config, weights}, classes, dataset{...}, reference[L tensors],
  history[...], metrics{...}, train_config{...}

``checkpoint_body`` is the one builder of that dict (``laya train`` and ``LayaModel.save`` both
call it); rebuilding a model from it is ``model.model_from_checkpoint``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from .errors import LayaError
from .fileio import atomic_torch_save
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


def checkpoint_body(*, backbone, spec, head, head_config: dict, dims: Sequence[int], classes: Sequence[str],
                    dataset: dict, reference: Sequence[torch.Tensor], history: list[dict], metrics: dict,
                    train_config: dict, store_backbone_weights: bool) -> dict:
    """Everything a checkpoint holds except the format header ``save_checkpoint`` adds.

    ``backbone``: the TappedBackbone; ``store_backbone_weights`` False only for frozen pretrained
    weights that load by name.
    """
    adapter = backbone.adapter
    return {
        "backbone": {
            "spec": spec.to_dict(),
            "weights": {k: v.detach().cpu() for k, v in backbone.model.state_dict().items()}
            if store_backbone_weights else None,
            "input": {"channels": adapter.channels, "size": list(adapter.size or []),
                      "mean": adapter.mean.flatten().tolist(), "std": adapter.std.flatten().tolist()},
        },
        "layers": list(spec.layers),
        "dims": list(dims),
        "head": {"kind": head.kind, "config": dict(head_config),
                 "weights": {k: v.detach().cpu() for k, v in head.state_dict().items()}},
        "classes": list(classes),
        "dataset": dict(dataset),
        "reference": [r.detach().cpu() for r in reference],
        "history": list(history),
        "metrics": dict(metrics),
        "train_config": dict(train_config),
    }


def checkpoint_summary(ckpt: dict) -> dict:
    """The JSON shape of ``laya info`` (documented in docs/checkpoint.md)."""
    spec = ckpt["backbone"]["spec"]
    return {
        "format_version": ckpt["format_version"],
        "versions": ckpt["versions"],
        "head": {"kind": ckpt["head"]["kind"], "config": ckpt["head"]["config"]},
        "backbone": {"name": spec["name"], "pretrained": spec["pretrained"], "finetune": spec["finetune"],
                     "pool": spec["pool"], "weights_in_file": ckpt["backbone"]["weights"] is not None},
        "layers": list(ckpt["layers"]),
        "dims": list(ckpt["dims"]),
        "classes": list(ckpt["classes"]),
        "dataset": ckpt["dataset"],
        "metrics": ckpt["metrics"],
        "train_config": ckpt.get("train_config", {}),
        "epochs": len(ckpt.get("history", [])),
    }
