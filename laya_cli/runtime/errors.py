"""User-facing errors: the CLI turns these into one line on stderr and exit code 2."""

from __future__ import annotations

import contextlib
import difflib
import signal
import threading


class LayaError(Exception):
    """A mistake in the user's input (options, files, data). Never a bug in laya."""


class LayaWarning(UserWarning):
    """What the Python API says as Python warns (``warnings.warn``): the notes a command prints as ``note:`` and
    ``warning:`` lines (an α collapse, a degenerate faithfulness, a fit that ended near chance). Filter it as any
    warning: ``warnings.simplefilter("ignore", laya_cli.LayaWarning)``."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM during training; the state of the last finished epoch is on disk (exit 130)."""


def unknown_choice(kind: str, name: str, choices) -> LayaError:
    """An error for an unknown name that suggests the closest valid ones (compared case-insensitively)."""
    choices = sorted(choices)
    by_folded = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(str(name).lower(), list(by_folded), n=3, cutoff=0.5)
    close = [by_folded[c] for c in close]
    hint = f"did you mean {', '.join(close)}?" if close else f"choose from {', '.join(choices)}"
    return LayaError(f"unknown {kind} '{name}': {hint}")


def match_choice(kind: str, name: str, choices) -> str:
    """The choice ``name`` stands for, compared case-insensitively (``IG`` -> ``ig``, ``LAYA`` -> ``laya``).

    The one rule for every named choice (options checked by ``config.check_choice``, heads, methods,
    datasets, formats): an exact match wins, then the one choice equal but for case; anything else is
    ``unknown_choice``'s error with its suggestions.
    """
    choices = list(choices)
    if name in choices:
        return name
    folded = [c for c in choices if c.lower() == str(name).lower()]
    if len(folded) == 1:
        return folded[0]
    raise unknown_choice(kind, name, choices)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Treat SIGTERM (a scheduler's or CI's kill) like Ctrl-C inside the block: training leaves a
    resumable state (the checkout's ``python -m benchmarks`` stops its benchmark processes the same way); exit 130."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
