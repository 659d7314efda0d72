"""The machine laya runs on, as settings: the ``LAYA_*`` environment variables read in more than one place (where
caches live, whether to download, how much data is held in memory) and the devices and precisions a job may ask
for. No torch: ``runtime/device.py`` resolves a device, this module only names the choices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .declare import check_fields, setting
from .errors import LayaError

DEVICES = ("auto", "cpu", "cuda", "mps")  # --device (runtime/device.py resolves it)
PRECISIONS = ("auto", "bf16", "fp32")  # --precision of backbone passes (runtime/device.py)
DEVICE_HELP = "auto, cpu, cuda or mps (auto: CUDA if available)."


def device_setting(panel: str = "Run"):
    """``--device``: the command line's default is auto (resolved by the command), a library object's cpu."""
    return setting("cpu", DEVICE_HELP, choices=DEVICES, command_default="auto", panel=panel)


def precision_setting(**option):
    """``--precision`` of the backbone passes, recorded resolved (``runtime/device.py``)."""
    return setting(
        "auto",
        "Backbone passes: auto (bf16 autocast on bf16-capable CUDA, else fp32), bf16 (CUDA only) or fp32.",
        choices=PRECISIONS,
        **{"panel": "Run", **option},
    )


CACHE_HELP = "Use the on-disk feature cache for frozen backbones."


@dataclass
class RunSettings:
    """How a job runs on this machine, not what it computes (``laya audit``, ``depth``, ``export``): the memory its
    batches are planned within, the precision of the backbone passes, the feature cache."""

    PANEL: ClassVar[str] = "Run"

    max_memory: str | None = setting(
        None,
        "Memory budget the batch sizes are planned within: a size (2G, 512M) or a fraction of the free memory "
        "(0.5); RSS on the CPU, allocated GPU memory on CUDA (default: 0.5 of the free memory).",
        metavar="SIZE",
        api=False,  # the API's caller bounds batch_size and internal_batch_size itself
    )
    precision: str = precision_setting(api=False)  # the API's caller runs its model as it is
    cache: bool = setting(True, CACHE_HELP, api=False)  # the API reads the caller's loaders

    def validate(self) -> RunSettings:
        check_fields(self)
        return self


# Data up to this size is held in memory (decoded images of a dataset, features of a split); larger
# data streams: images decoded batch by batch, features in the sharded store (docs/scaling.md).
IN_MEMORY_MB = 1024


def in_memory_budget_mb() -> float:
    """``LAYA_IN_MEMORY_MB`` (0 = always stream), else ``IN_MEMORY_MB``."""
    try:
        return float(os.environ.get("LAYA_IN_MEMORY_MB", IN_MEMORY_MB))
    except ValueError:
        raise LayaError(f"LAYA_IN_MEMORY_MB must be a number of MiB, got {os.environ['LAYA_IN_MEMORY_MB']!r}") from None


def cache_dir():
    """Where laya keeps what it computed once: feature-cache entries, sharded stores, image scans."""
    return Path(os.environ.get("LAYA_CACHE_DIR", Path.home() / ".cache" / "laya" / "features"))


def docs_dir() -> Path | None:
    """Where laya's documentation is on this machine: the pages a wheel installs (``share/doc/laya-audit`` under
    the environment's prefix), else a checkout's ``docs/``; None when neither is there."""
    import sys

    for folder in (Path(sys.prefix) / "share" / "doc" / "laya-audit", Path(__file__).resolve().parents[2] / "docs"):
        if (folder / "metrics.md").is_file():
            return folder
    return None


def offline() -> bool:
    """``LAYA_OFFLINE`` set (to anything but empty, 0, false, no, off): laya downloads nothing: no
    dataset, no pretrained weights (the command line also puts the Hugging Face hub offline)."""
    return os.environ.get("LAYA_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")
