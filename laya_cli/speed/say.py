"""How every speed benchmark reports: plain lines through rich, as all CLI output (no markup, lines unbroken)."""

from __future__ import annotations

import sys


def console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=110)  # a log or a pipe: whole lines


def say(line: str) -> None:
    """One line (or a block of plain text) of a benchmark's report, through rich as all CLI output."""
    console().print(line, highlight=False, markup=False, soft_wrap=True)
    sys.stdout.flush()  # in order with what the child processes print, even into a file
