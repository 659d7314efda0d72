"""User-facing errors: the CLI turns these into one line on stderr and exit code 2."""

from __future__ import annotations

import difflib


class LayaError(Exception):
    """A mistake in the user's input (options, files, data). Never a bug in laya."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM during training; the state of the last finished epoch is on disk (exit 130)."""


def unknown_choice(kind: str, name: str, choices) -> LayaError:
    """An error for an unknown name that suggests the closest valid ones."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"choose from {', '.join(choices)}"
    return LayaError(f"unknown {kind} '{name}': {hint}")
