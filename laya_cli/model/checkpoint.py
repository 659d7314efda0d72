"""The checkpoint format: one file, plain containers and tensors, weights_only-loadable.

Layout (``format_version`` 1), documented in docs/checkpoint.md:
  format, format_version, versions{torch,timm,laya}, backbone{spec..., weights, input},
  layers, dims, head{kind, config, weights}, classes, dataset{...}, reference[L tensors],
  history[...], metrics{...}, train_config{...}, digest{sha256} (integrity.py)

``checkpoint_body`` is the one builder of that dict (``laya train`` and ``LayaModel.save`` both
call it); rebuilding a model from it is ``model.laya_model.model_from_checkpoint``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from .. import backbones as bb
from ..runtime.errors import LayaError
from ..runtime.fileio import atomic_torch_save
from ..runtime.trust import safe_torch_load
from .integrity import check_digest, check_finite_weights, with_digest

FORMAT = "laya-checkpoint"
FORMAT_VERSION = 1


def versions() -> dict:
    from .. import __version__

    return {"torch": str(torch.__version__), "timm": installed_version("timm"), "laya": __version__}


def installed_version(package: str) -> str:
    """``package``'s version without importing it: timm's import takes seconds (and imports wandb where that is
    installed), and a text model's job needs nothing else of timm (3 s of a 36 s MiniLM training, docs/results/
    dispatch.md). A module already imported answers with its own ``__version__``."""
    module = sys.modules.get(package)
    if module is not None:
        return str(module.__version__)
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # not installed as a distribution (a source checkout on the path)
        return str(importlib.import_module(package).__version__)


def save_checkpoint(ckpt: dict, path: str | Path) -> None:
    """Write ``ckpt`` with its header and the digest of its contents (``integrity.py``), whole or not at all."""
    ckpt = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": versions(), **ckpt}
    atomic_torch_save(with_digest(ckpt), path)


def read_checkpoint(path: str | Path) -> dict:
    """Load and validate a checkpoint dict: never unpickles code (weights_only=True); its contents match the digest
    written with it, and its heads' weights are finite (``integrity.py``), else one line naming the file."""
    path = Path(path).expanduser()
    ckpt = safe_torch_load(path, "laya checkpoint")
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise LayaError(f"{path} is not a laya checkpoint (no '{FORMAT}' marker)")
    version = ckpt.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise LayaError(
            f"{path} has checkpoint format version {version}; this laya reads up to {FORMAT_VERSION} — upgrade laya"
        )
    check_digest(ckpt, path)
    check_finite_weights(ckpt, path)
    return ckpt


def checkpoint_task(ckpt: dict) -> str:
    """The task a checkpoint was trained for: ``lm`` (a language model's heads per position, ``--task lm``) or
    ``classify`` (every checkpoint from before the field was written)."""
    return "lm" if ckpt.get("task") == "lm" else "classify"


def checkpoint_body(
    *,
    backbone,
    spec,
    head,
    head_config: dict,
    dims: Sequence[int],
    classes: Sequence[str],
    dataset: dict,
    reference: Sequence[torch.Tensor],
    history: list[dict],
    metrics: dict,
    train_config: dict,
    weights_file: str | None = None,
    feature_dtype: str = "float32",
    recorded: dict | None = None,
    tap_reference: Sequence[torch.Tensor] | None = None,
    options: dict | None = None,
) -> dict:
    """Everything a checkpoint holds except the format header ``save_checkpoint`` adds.

    ``backbone``: the TappedBackbone; ``spec`` its resolved BackboneSpec. The backbone weights
    follow ``backbones.checkpoint_weights``/``checkpoint_extras`` (none for frozen pretrained hub
    weights, which load by name and are checked by SHA-256; a .pt2 program travels whole);
    ``weights_file`` is the ``--weights`` file it was built from. ``recorded``: the backbone section
    of the checkpoint a model was loaded from (``LayaModel.save`` of a loaded model): it keeps that
    section's choice of storing the weights and its weights source. ``tap_reference``: the mean
    unpooled activation per tap (the network scope's reference, docs/checkpoint.md), stored when given.
    ``options``: the command line's resolved options (``{"command", "values"}``), stored when given.
    """
    adapter = backbone.adapter
    weights = bb.checkpoint_weights(backbone, spec, weights_file)
    extras = bb.checkpoint_extras(backbone, spec, weights_file)
    if recorded is not None:
        if recorded.get("weights") is not None and weights is None and "program" not in extras:
            weights = {k: v.detach().cpu() for k, v in backbone.model.state_dict().items()}
        extras["source"] = recorded.get("source", extras["source"])
    return {
        "backbone": {
            "spec": spec.to_dict(),
            "weights": weights,
            **extras,  # source, sha256, formats (.pt2: program)
            "input": adapter.record(),  # images: channels, size, mean, std; text: kind "tokens", tokenizer…
        },
        "layers": list(spec.layers),
        "dims": list(dims),
        "head": {
            "kind": head.kind,
            "config": dict(head_config),
            "weights": {k: v.detach().cpu() for k, v in head.state_dict().items()},
        },
        "classes": list(classes),
        "dataset": dict(dataset),
        "feature_dtype": feature_dtype,
        "reference": [r.detach().cpu() for r in reference],
        **({"tap_reference": [t.detach().cpu() for t in tap_reference]} if tap_reference is not None else {}),
        "history": list(history),
        "metrics": _metrics_of(metrics, len(dims), getattr(spec, "reshaped", False)),
        "train_config": dict(train_config),
        **({"options": dict(options)} if options is not None else {}),
    }


def _metrics_of(metrics: dict, n_layers: int, reshaped: bool) -> dict:
    """The metrics as stored, less an α collapse summary that is not this head's: a model that ``laya depth`` cut
    (``--truncate``) or dropped layers from (``--drop``) starts from its full model's metrics, and that summary
    describes the full model's α (over other layers, or over layers that now read other streams)."""
    out = dict(metrics)
    if out.get("alpha_collapse") and (reshaped or out["alpha_collapse"].get("layers") != n_layers):
        out["alpha_collapse"] = None  # not measured on this model
    return out


def _text_summary(recorded_input: dict) -> dict | None:
    if recorded_input.get("kind") != "tokens":
        return None
    keys = ("max_length", "pad_id", "vocab_size", "source")
    return {k: recorded_input.get(k) for k in keys}


def untrained_backbone(ckpt: dict) -> str | None:
    """The warning a classifier's checkpoint deserves when its backbone was never trained (frozen at random
    initialisation); None otherwise (a language model's is its own pretrained model)."""
    from ..backbones.build import frozen_random, frozen_random_warning

    section = ckpt["backbone"]
    if checkpoint_task(ckpt) == "lm" or not frozen_random(section["spec"]["finetune"], section.get("source") or ""):
        return None
    return frozen_random_warning(section["spec"]["name"])


def checkpoint_summary(ckpt: dict) -> dict:
    """The JSON shape of ``laya info`` (documented in docs/checkpoint.md)."""
    spec = ckpt["backbone"]["spec"]
    return {
        "format_version": ckpt["format_version"],
        "versions": ckpt["versions"],
        "task": ckpt.get("task", "classify"),  # lm: a language model's heads (laya train --task lm, docs/lm.md)
        "head": {"kind": ckpt["head"]["kind"], "config": ckpt["head"]["config"]},
        "backbone": {
            "name": spec["name"],
            "pretrained": spec["pretrained"],
            "finetune": spec["finetune"],
            "pool": spec["pool"],
            "weights_in_file": ckpt["backbone"]["weights"] is not None,
            # where the weights came from, their SHA-256, each tap's layout (docs/backbones.md)
            "weights_source": ckpt["backbone"].get("source"),
            "weights_sha256": ckpt["backbone"].get("sha256"),
            "pool_declared_by": ckpt["backbone"].get("pool_declared_by"),  # a sentence-transformers folder's pooling
            # weights the model's files lacked, initialised (seeded) by its library at every load (docs/text.md)
            "initialised_weights": list(ckpt["backbone"].get("initialised") or []),
            "formats": list(ckpt["backbone"].get("formats") or spec.get("formats") or []),
            # text backbones: tokens per text and where the stored tokenizer came from (docs/text.md)
            "text": _text_summary(ckpt["backbone"].get("input") or {}),
            # parameters stored in the file (None when the weights load by name)
            "parameters": (
                sum(int(t.numel()) for t in ckpt["backbone"]["weights"].values() if t.is_floating_point())
                if ckpt["backbone"]["weights"] is not None
                else None
            ),
        },
        "layers": list(ckpt["layers"]),
        "dims": list(ckpt["dims"]),
        "classes": list(ckpt["classes"]),
        "dataset": ckpt["dataset"],
        "metrics": ckpt["metrics"],
        "train_config": ckpt.get("train_config", {}),
        "epochs": len(ckpt.get("history", [])),
        "truncated": ckpt.get("truncated"),  # laya depth --truncate: cut after which tap (docs/depth.md)
        "dropped": ckpt.get("dropped"),  # laya depth --drop: which layers are gone (docs/depth.md)
        "options": ckpt.get("options"),  # the resolved command line of laya train (docs/integrations.md)
        "warnings": [w for w in [untrained_backbone(ckpt)] if w],  # what laya info and laya audit warn of
    }
