"""The machine laya runs on, as settings: the ``LAYA_*`` environment variables (``VARIABLES``: each declared once
with its kind and range, read only through ``env``, all of them checked by ``check_environment`` before a command
does any work) and the devices and precisions a job may ask for. No torch: ``runtime/device.py`` resolves a
device, this module only names the choices.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .declare import Settings, check_fields, evolve, setting
from .errors import LayaError
from .memory import MemoryRequest, check_max_memory

DEVICES = ("auto", "cpu", "cuda", "mps")  # --device (runtime/device.py resolves it)
PRECISIONS = ("auto", "bf16", "fp32")  # --precision of backbone passes (runtime/device.py)
DEVICE_HELP = "auto, cpu, cuda or mps (auto: CUDA if available)."


def device_setting(panel: str = "Run"):
    """``--device``: the command line's default is auto (resolved by the command), a library object's cpu; under
    torchrun CUDA resolves to this rank's GPU (cuda:N), which a resolved object holds."""
    return setting(
        "cpu", DEVICE_HELP, choices=DEVICES, command_default="auto", panel=panel, resolved=r"cuda:\d+",
        rule="auto, cpu, cuda or mps",  # resolve_device's words
    )  # fmt: skip


def precision_setting(**option):
    """``--precision`` of the backbone passes, recorded resolved (``runtime/device.py``)."""
    return setting(
        "auto",
        "Backbone passes: auto (bf16 autocast on bf16-capable CUDA, else fp32), bf16 (CUDA only) or fp32.",
        choices=PRECISIONS,
        **{"panel": "Run", **option},
    )


CACHE_HELP = "Use the on-disk feature cache for frozen backbones."


@dataclass(frozen=True)
class RunSettings(Settings):
    """How a job runs on this machine, not what it computes (``laya audit``, ``depth``, ``export``): the memory its
    batches are planned within, the precision of the backbone passes, the feature cache. Command-line options only:
    the Python API's caller bounds its batch sizes, runs its model as it is and hands over its own loaders."""

    PANEL: ClassVar[str] = "Run"

    max_memory: str | None = setting(
        None,
        "Memory budget the batch sizes are planned within: a size (2G, 512M) or a fraction of the free memory "
        "(0.5); RSS on the CPU, allocated GPU memory on CUDA (default: 0.5 of the free memory).",
        metavar="SIZE",
    )
    precision: str = precision_setting()
    cache: bool = setting(True, CACHE_HELP)
    # The batch sizes the user set, by name (``with_batches``): the memory plan never overrides them.
    fixed: frozenset[str] = frozenset()

    def with_batches(self, **batches) -> RunSettings:
        """This run knowing which of a job's ``batches`` the user set (not None: the command line's None leaves one
        to the plan), as a new object."""
        return evolve(self, fixed=frozenset(name for name, value in batches.items() if value is not None))

    def validate(self) -> RunSettings:
        check_fields(self)
        check_max_memory(self.max_memory)  # a size or a fraction: one line now, not once the job has started
        return self

    @property
    def memory(self) -> MemoryRequest:
        """What the job asks of the memory planner: ``--max-memory`` and the batch sizes the user set."""
        return MemoryRequest(self.max_memory, self.fixed)


# --------------------------------------------------------------------------- the LAYA_* variables

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Variable:
    """One ``LAYA_*`` environment variable: what it holds (``kind``: number, whole, switch, path or text), its range
    and its unit; unset or empty, the reader's default holds."""

    name: str
    help: str
    kind: str = "number"
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    unit: str = ""

    def rule(self) -> str:
        """What the variable must be, in words: 'a number of MiB, greater than 0 and at most 1048576'."""
        if self.kind == "switch":
            return f"on ({', '.join(TRUE_WORDS)}) or off ({', '.join(FALSE_WORDS)})"
        what = {"number": "a number", "whole": "a whole number"}.get(self.kind, "text")
        what += f" of {self.unit}" if self.unit else ""
        bounds = [f"at least {_plain(self.minimum)}"] if self.minimum is not None else []
        bounds += [f"greater than {_plain(self.above)}"] if self.above is not None else []
        bounds += [f"at most {_plain(self.maximum)}"] if self.maximum is not None else []
        return f"{what}, {' and '.join(bounds)}" if bounds else what


def _plain(x: float) -> str:
    """1,048,576 rather than 1.04858e+06."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


VARIABLES = {
    v.name: v
    for v in (
        Variable("LAYA_OFFLINE", "no downloads (datasets, pretrained weights; the hub goes offline too)", "switch"),
        Variable("LAYA_CACHE_DIR", "the feature cache (default ~/.cache/laya/features)", "path"),
        Variable("LAYA_DATA_DIR", "where datasets are downloaded (default ~/.cache/laya/data)", "path"),
        Variable(
            "LAYA_IN_MEMORY_MB",
            "data up to this size is held in memory, larger streams (0: always stream)",
            minimum=0,
            maximum=2**40,
            unit="MiB",
        ),  # fmt: skip
        Variable("LAYA_SHARD_MB", "the size of one shard of the feature store", above=0, maximum=2**20, unit="MiB"),
        Variable(
            "LAYA_SHUFFLE_MB",
            "the shuffle buffer of head training on a feature store",
            above=0,
            maximum=2**30,
            unit="MiB",
        ),  # fmt: skip
        Variable("LAYA_WORKERS", "image-decoding worker processes", "whole", minimum=0, maximum=1024),
        Variable("LAYA_PIN_MEMORY", "decoding workers pin their batches on CUDA machines", "switch"),
        Variable("LAYA_BF16", "bf16 autocast of backbone passes on bf16-capable CUDA (--precision auto)", "switch"),
        Variable(
            "LAYA_PROGRESS_INTERVAL",
            "seconds between two plain progress lines in a log",
            minimum=0,
            maximum=10**9,
            unit="seconds",
        ),  # fmt: skip
        Variable("LAYA_DIST_BACKEND", "the torch.distributed backend under torchrun (e.g. gloo)", "text"),
        Variable(
            "LAYA_DIST_TIMEOUT", "seconds a collective waits under torchrun", above=0, maximum=10**9, unit="seconds"
        ),  # fmt: skip
        Variable("LAYA_LOG_TO", "the experiment tracker of --log-to when the flag is not given", "text"),
    )
}


def env(name: str, default=None):
    """The ``LAYA_*`` variable ``name`` as its declaration reads it (``VARIABLES``), or ``default`` when it is unset
    or empty; a value outside its kind or range is one ``LayaError`` line naming the variable."""
    var = VARIABLES[name]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if var.kind == "switch":
        if raw.lower() in TRUE_WORDS + FALSE_WORDS:
            return raw.lower() in TRUE_WORDS
        raise LayaError(f"{name} must be {var.rule()}, got {raw!r}")
    if var.kind == "path":
        return Path(raw).expanduser()
    if var.kind == "text":
        return raw
    return _number(var, raw)


def _number(var: Variable, raw: str) -> float | int:
    try:
        value = int(raw) if var.kind == "whole" else float(raw)
    except (ValueError, OverflowError):
        value = None
    low_ok = value is not None and (var.minimum is None or value >= var.minimum)
    low_ok = low_ok and (var.above is None or value > var.above)
    finite = isinstance(value, int) or (value is not None and math.isfinite(value))  # an int may not fit a float
    if not low_ok or not finite or (var.maximum is not None and value > var.maximum):
        shown = raw if len(raw) <= 24 else f"{raw[:6]}… ({len(raw)} characters)"
        raise LayaError(f"{var.name} must be {var.rule()}, got {shown!r}")
    return value


def check_environment() -> None:
    """Every declared ``LAYA_*`` variable that is set, read once: a bad one is one line before any work (the
    commands call this first; a variable a command never reads is checked all the same)."""
    for name in VARIABLES:
        env(name)


# Data up to this size is held in memory (decoded images of a dataset, features of a split); larger
# data streams: images decoded batch by batch, features in the sharded store (docs/scaling.md).
IN_MEMORY_MB = 1024


def in_memory_budget_mb() -> float:
    """``LAYA_IN_MEMORY_MB`` (0 = always stream), else ``IN_MEMORY_MB``."""
    return env("LAYA_IN_MEMORY_MB", IN_MEMORY_MB)


def cache_dir() -> Path:
    """Where laya keeps what it computed once: feature-cache entries, sharded stores, image scans."""
    return env("LAYA_CACHE_DIR", Path.home() / ".cache" / "laya" / "features")


def data_dir() -> Path:
    """Where datasets are downloaded and looked for."""
    return env("LAYA_DATA_DIR", Path.home() / ".cache" / "laya" / "data")


def docs_dir() -> Path | None:
    """Where laya's documentation is on this machine: the pages a wheel installs (``share/doc/laya-audit`` under
    the environment's prefix), else a checkout's ``docs/``; None when neither is there."""
    import sys

    for folder in (Path(sys.prefix) / "share" / "doc" / "laya-audit", Path(__file__).resolve().parents[2] / "docs"):
        if (folder / "metrics.md").is_file():
            return folder
    return None


def offline() -> bool:
    """``LAYA_OFFLINE`` on (1, true, yes, on): laya downloads nothing: no dataset, no pretrained weights (the
    command line also puts the Hugging Face hub offline)."""
    return env("LAYA_OFFLINE", False)
