"""Weights: reading a user's file safely, loading it into an architecture, hashing, hub caches."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import torch
from torch import Tensor, nn

from ..runtime.errors import LayaError
from ..runtime.fileio import file_sha256  # noqa: F401  (re-exported: backbones.file_sha256)

CLASSIFIER_KEYS = ("head.", "fc.", "classifier.", "heads.", "head_dist.", "last_linear.")


def read_weights_file(path: str | Path, trust_pickle: bool = False) -> dict | nn.Module:
    """A state dict from .pt/.pth/.bin (weights_only) or .safetensors; a module only if trusted."""
    from ..runtime.trust import load_trusted_pickle, safe_torch_load

    path = Path(path).expanduser()
    if path.suffix == ".safetensors" and path.is_file():
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as e:
            raise LayaError(f"cannot read weights file {path}: {type(e).__name__}") from None
    if trust_pickle:
        obj = load_trusted_pickle(path) if path.is_file() else safe_torch_load(path, "weights file")
    else:
        try:
            obj = safe_torch_load(path, "weights file")
        except LayaError as e:
            if "pickled Python objects" in str(e):
                raise LayaError(f"{e}; if it is a pickled model you trust, add --trust-pickle") from None
            raise
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
        if obj and all(isinstance(v, Tensor) for v in obj.values()):
            return {k.removeprefix("module."): v for k, v in obj.items()}
    raise LayaError(f"{path} holds no state dict of tensors")


def load_state(model: nn.Module, state_dict: dict, name: str) -> None:
    """Load weights; the checkpoint's own classifier is ignored (we replace it with a head): classifier
    tensors that do not fit the model's own (a model attached with a 10-class ``fc``) are left out."""
    target = model.state_dict()
    state_dict = {
        k: v
        for k, v in state_dict.items()
        if not (k.startswith(CLASSIFIER_KEYS) and (k not in target or target[k].shape != v.shape))
    }
    try:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
    except RuntimeError as e:  # shape mismatches
        detail = next((line.strip() for line in str(e).splitlines() if "mismatch" in line), "shape mismatch")
        raise LayaError(f"weights do not fit {name}: {detail[:200]}") from None
    unexpected = [k for k in unexpected if not k.startswith(CLASSIFIER_KEYS)]
    missing = [k for k in missing if not k.startswith(CLASSIFIER_KEYS)]
    if missing or unexpected:
        sample = ", ".join((missing or unexpected)[:3])
        raise LayaError(
            f"weights do not fit {name}: {len(missing)} missing, {len(unexpected)} unexpected keys (e.g. {sample})"
        )


def _state_hash(state: dict[str, Tensor]):
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().cpu().contiguous()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        # reshape(-1): 0-dim tensors (BatchNorm's num_batches_tracked) cannot be viewed as bytes
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h


def state_fingerprint(state: dict[str, Tensor]) -> str:
    """A content hash of a state dict: part of the feature-cache key."""
    return _state_hash(state).hexdigest()[:16]


def weights_sha256(state: dict[str, Tensor]) -> str:
    """The full SHA-256 of a state dict's content (names, dtypes, bytes): what the checkpoint
    records and what audit/export compare the weights they load against."""
    return _state_hash(state).hexdigest()


# --------------------------------------------------------------------------- hub caches


def offline() -> bool:
    """No download attempts: LAYA_OFFLINE or HF_HUB_OFFLINE set."""
    from ..runtime.environment import offline as laya_offline

    return laya_offline() or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no")


_reachable: dict[str, bool] = {}


def reachable(host: str, timeout: float = 3.0) -> bool:
    """Whether ``host:443`` answers (asked once per process): an offline machine fails fast here
    instead of in the hub client's retry loop."""
    if host not in _reachable:
        import socket

        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            _reachable[host] = True
        except OSError:
            _reachable[host] = False
    return _reachable[host]


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (``HF_HUB_CACHE``, ``HF_HOME``,
    ``XDG_CACHE_HOME``) — huggingface_hub itself reads it once, at import."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hub_file_cached(repo_id: str, filenames) -> bool:
    """Whether the Hugging Face cache holds one of these files of ``repo_id``."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except Exception:  # pragma: no cover
        return False
    repo, _, revision = repo_id.partition("@")
    return any(
        isinstance(try_to_load_from_cache(repo, f, cache_dir=str(hf_cache_dir()), revision=revision or None), str)
        for f in filenames
        if f
    )


def torch_hub_cached(url: str) -> Path:
    """Where torch.hub (``TORCH_HOME``) keeps a downloaded checkpoint."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


@contextlib.contextmanager
def hub_session(offline_now: bool):
    """huggingface_hub without network when ``offline_now`` (it reads HF_HUB_OFFLINE at import),
    and without its retry chatter on stderr."""
    import logging

    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)
    constants = None
    try:
        from huggingface_hub import constants
    except Exception:  # pragma: no cover - timm always brings it
        pass
    before = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None and offline_now:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if constants is not None:
            constants.HF_HUB_OFFLINE = before
        log.setLevel(level)


def require_download(backbone: str, host: str, missing: str, switches: str = "LAYA_OFFLINE/HF_HUB_OFFLINE") -> bool:
    """Weights that are not cached: False (they will be downloaded) when downloads are on and ``host``
    answers; else the one-line error saying what is ``missing`` and why it cannot be fetched."""
    if offline() or not reachable(host):
        why = f"downloads are off ({switches})" if offline() else f"{host} is unreachable"
        raise pretrained_unavailable(backbone, f"{missing} and {why}")
    return False


def pretrained_unavailable(backbone: str, cause: str) -> LayaError:
    """The one-line error when pretrained weights cannot be had (offline, empty caches)."""
    return LayaError(
        f"pretrained weights for {backbone} are not available ({cause}); pass --weights FILE "
        "(a .safetensors/.bin/.pth state dict), or point the hub caches at a copy that has them "
        "(timm: HF_HOME, with HF_HUB_OFFLINE=1 to stay offline; torchvision: TORCH_HOME), "
        "or train it from scratch with --no-pretrained --finetune --input-size N, N near your images' own side "
        "(their side rounded up to 32, e.g. 32 for 28-px images: from scratch a model need not see 224 px, and "
        "upscaled images cost the square of the factor in time; frozen, random weights give random features)"
    )
