"""A tracker is a guest of the run (``--log-to``, docs/integrations.md): whatever it fails to do, the command's own
work and outputs go on.

``Guest`` wraps the tracker a command opened: every call that fails (a full disk under a TensorBoard folder, an
MLflow server gone away, an artifact that cannot be copied) is caught and remembered as what was not logged, and
the command says so when it ends (``missed_lines``) and exits with ``EXIT_NOT_LOGGED`` (docs/usage.md). What can be
known before any work — a tracker that cannot start or write at all — is ``Tracker.check``'s one line, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LayaError
from .base import Tracker

EXIT_NOT_LOGGED = 4  # the command's exit code when it succeeded but its tracker did not log everything (cli.common)


@dataclass
class Missed:
    """One call the tracker failed: what it was to log, and why (the exception's first line)."""

    what: str
    reason: str


def reason_of(e: BaseException) -> str:
    """An exception as a short reason: an OS error's own words, else its first line (at most 160 characters)."""
    text = str(getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0])
    return text if len(text) <= 160 else text[:159] + "…"


@dataclass
class Guest(Tracker):
    """``tracker`` with every failure caught: ``missed`` lists what was not logged."""

    tracker: Tracker
    missed: list[Missed] = field(default_factory=list)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.tracker.name

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # the tracker's failure, never the command's: remembered, said at the end
            self.missed.append(Missed(what, reason_of(e)))
            return None

    def check(self) -> None:
        self.tracker.check()

    def start(self, run_name: str, params: dict, tags: dict[str, str]) -> None:
        self._call("the run's start (its options and tags)", self.tracker.start, run_name, params, tags)

    def metrics(self, values: dict, step: int | None = None) -> None:
        at = f" at step {step}" if step is not None else ""
        self._call(f"{len(values)} metric(s){at}", self.tracker.metrics, values, step)

    def tags(self, values: dict[str, str]) -> None:
        self._call(f"{len(values)} tag(s)", self.tracker.tags, values)

    def artifact(self, path: str | Path) -> None:
        self._call(f"the file {Path(path).name}", self.tracker.artifact, path)

    def finish(self, status: str = "FINISHED") -> None:
        self._call(f"the run's end ({status.lower()})", self.tracker.finish, status)

    def where(self) -> str:
        return self._call("where the run went", self.tracker.where) or self.tracker.name

    def start_failed(self) -> bool:
        return any(m.what.startswith("the run's start") for m in self.missed)

    def start_error(self) -> LayaError:
        """A failed start, as the one line of a command that has not begun its work (``laya train``)."""
        reason = next(m.reason for m in self.missed if m.what.startswith("the run's start"))
        return LayaError(f"--log-to {self.tracker.name}: the tracker could not start its run ({reason})")

    def missed_lines(self) -> list[str]:
        """What was not logged, in two lines at most: how many calls failed, the first ones and the first reason."""
        if not self.missed:
            return []
        shown = ", ".join(m.what for m in self.missed[:3]) + (", …" if len(self.missed) > 3 else "")
        return [
            f"--log-to {self.tracker.name} did not log {len(self.missed)} call(s) ({shown}): {self.missed[0].reason}",
            f"the command's own outputs are complete; exit {EXIT_NOT_LOGGED} says the tracker's record is not",
        ]
