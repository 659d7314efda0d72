"""A ``torch.export`` program (``.pt2``, written by ``torch.export.save``) as a backbone.

``torch.export.load`` reads the graph from JSON and the weights as raw tensor bytes, but a
.pt2 archive may also carry pickled payloads (tensors it could not store raw, custom or opaque
objects, legacy-format weights, sample inputs it falls back to unpickling) and compiled
AOTInductor code. laya inspects the archive first and refuses any of those unless
``--trust-pickle`` is given; only then does it call ``torch.export.load``. The program is
unflattened (``torch.export.unflatten``) so its modules keep their original names and can be
tapped like any other model's.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
import zipfile

import torch
from torch import nn

from ..runtime.errors import LayaError


def _risky_payloads(z: zipfile.ZipFile, root: str, rel: set[str]) -> list[str]:
    models = sorted(r[len("models/") : -len(".json")] for r in rel if r.startswith("models/") and r.endswith(".json"))
    risky = []
    if any(r.startswith(("data/aotinductor/", "data/executorch/", "data/mtia")) for r in rel):
        risky.append("compiled code (AOTInductor)")
    for m in models:
        if f"data/weights/{m}.pt" in rel or f"data/constants/{m}.pt" in rel:
            risky.append("legacy pickled weights")
        for kind in ("weights", "constants"):
            cfg = f"data/{kind}/{m}_{kind}_config.json"
            if cfg not in rel:
                continue
            try:
                entries = json.loads(z.read(root + cfg)).get("config", {})
            except Exception:
                raise LayaError(f"its {kind} table is not valid JSON") from None
            for fqn, payload in entries.items():
                path = str(payload.get("path_name", ""))
                if payload.get("use_pickle") or path.startswith(("custom_obj_", "opaque_obj_")):
                    risky.append(f"pickled {kind} ({fqn})")
        sample = f"data/sample_inputs/{m}.pt"
        if sample in rel:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.load(io.BytesIO(z.read(root + sample)), map_location="cpu", weights_only=True)
            except Exception:
                risky.append("pickled sample inputs")
    return risky


def check_program(data: bytes, where: str, trust_pickle: bool = False) -> None:
    """Refuse a .pt2 that is not a torch.export archive or that would unpickle/run code."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise LayaError(f"{where} is not a torch.export program (.pt2): not a zip archive (corrupt or truncated?)")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = [n for n in z.namelist() if not n.endswith("/")]
            roots = {n.split("/", 1)[0] for n in names}
            if len(roots) != 1 or any("/" not in n for n in names):
                raise LayaError(f"{where} is not a torch.export program (.pt2): unexpected archive layout")
            root = roots.pop() + "/"
            rel = {n[len(root) :] for n in names}
            if "archive_version" not in rel or not any(r.startswith("models/") for r in rel):
                if trust_pickle:
                    return
                raise LayaError(
                    f"{where} is not a torch.export program in the current .pt2 format (an older format "
                    "may hold pickles); re-save it with torch.export.save"
                )
            risky = _risky_payloads(z, root, rel)
    except LayaError as e:
        if str(e).startswith("its "):
            raise LayaError(f"{where} is a corrupt .pt2: {e}") from None
        raise
    except (zipfile.BadZipFile, OSError, KeyError, ValueError) as e:
        raise LayaError(f"{where} is a corrupt .pt2 archive ({type(e).__name__})") from None
    if risky and not trust_pickle:
        raise LayaError(
            f"{where} holds {risky[0]}, which would run code when loaded; laya refuses "
            "(add --trust-pickle only for a file you trust)"
        )


@contextlib.contextmanager
def _quiet_torch_export():
    loggers = [logging.getLogger(n) for n in ("torch.export", "torch._export", "torch.export.pt2_archive._package")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def load_program(data: bytes, where: str, trust_pickle: bool = False) -> tuple[nn.Module, tuple]:
    """The unflattened module of a .pt2 and its input shape (C, H, W), checked first.

    The module gets ``laya_module_types``: each submodule's original class (from the graph's
    ``nn_module_stack``), which unflattening does not keep."""
    check_program(data, where, trust_pickle)
    try:
        with _quiet_torch_export():
            ep = torch.export.load(io.BytesIO(data))
            module = torch.export.unflatten(ep)
    except Exception as e:
        detail = (str(e).strip().splitlines() or [""])[0][:160]
        raise LayaError(f"cannot load torch.export program {where}: {type(e).__name__}: {detail}") from None
    types = {}
    for node in ep.graph.nodes:
        for fqn, kind in (node.meta.get("nn_module_stack") or {}).values():
            types.setdefault(fqn, str(kind))
    module.laya_module_types = types
    return module, _input_shape(ep, where)


def _input_shape(ep, where: str) -> tuple:
    users = list(ep.graph_signature.user_inputs)
    if len(users) != 1:
        raise LayaError(f"{where} takes {len(users)} inputs; laya feeds one image batch (B×C×H×W)")
    node = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == users[0])
    val = node.meta.get("val")
    shape = tuple(getattr(val, "shape", ()))
    if len(shape) != 4:
        raise LayaError(f"{where} takes an input of shape {tuple(shape)}; laya feeds image batches B×C×H×W")
    if isinstance(shape[0], int):
        raise LayaError(
            f"{where} was exported with a fixed batch size {shape[0]}; export it with a dynamic batch: "
            "dynamic_shapes={'x': {0: torch.export.Dim('batch')}}"
        )
    return tuple(int(s) if isinstance(s, int) else None for s in shape[1:])
