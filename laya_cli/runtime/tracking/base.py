"""What a command asks of an experiment tracker, and how laya names what it logs.

A ``Tracker`` holds one run: ``check`` (it can start and write: one line before any work otherwise), ``start`` (its
name, the resolved options as parameters, tags), ``metrics`` (a dict of numbers, at a step or not), ``tags``,
``artifact`` (a file), ``finish`` (the status). The base class does nothing, so a command logs unconditionally and
``--log-to`` unset costs nothing. A command holds its tracker through ``guest.Guest``: a failure after the check is
said at the end, never fatal.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

STATUSES = ("FINISHED", "FAILED", "KILLED")  # MLflow's names; TensorBoard records the status as text


def metric_key(*parts: str) -> str:
    """``faithfulness/ig``: the parts joined by ``/``, each kept to the characters MLflow accepts in a key
    (``deletion@1`` -> ``deletion_at_1``), so a metric has the same name in every tracker."""
    clean = [re.sub(r"[^\w.\- ]", "_", str(p).replace("@", "_at_")) for p in parts if p != ""]
    return "/".join(clean)


def finite(metrics: dict) -> dict[str, float]:
    """The metrics that are numbers (booleans as 0/1), finite; undefined ones (None, NaN) are left out."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[k] = float(v)
    return out


def flat_params(values: dict, prefix: str = "") -> dict[str, str]:
    """Options as tracker parameters: nested dicts as dotted names, every value as text (None as 'None')."""
    out = {}
    for k, v in values.items():
        if isinstance(v, dict):
            out.update(flat_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    return out


class Tracker:
    """One tracked run. This base class is the tracker of a command without ``--log-to``: it does nothing."""

    name = "none"

    def check(self) -> None:
        """Whether the tracker can start and write (its store reachable, its folder writable), checked before any
        work with a short timeout: one ``LayaError`` line otherwise."""

    def start(self, run_name: str, params: dict, tags: dict[str, str]) -> None:
        pass

    def metrics(self, values: dict, step: int | None = None) -> None:
        pass

    def tags(self, values: dict[str, str]) -> None:
        pass

    def artifact(self, path: str | Path) -> None:
        pass

    def finish(self, status: str = "FINISHED") -> None:
        pass

    def where(self) -> str:
        """Where the run went, for the line the command prints."""
        return ""
