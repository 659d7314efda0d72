"""How every speed benchmark reports: plain lines through rich, as all CLI output (no markup, lines unbroken)."""

from __future__ import annotations

import sys


def console():
    """A rich console: the terminal's width, or 110 columns into a log or a pipe (whole lines)."""
    from rich.console import Console

    terminal = Console()
    return terminal if terminal.is_terminal else Console(width=110)


def say(line: str) -> None:
    """One line (or a block of plain text) of a benchmark's report, through rich as all CLI output."""
    console().print(line, highlight=False, markup=False, soft_wrap=True)
    sys.stdout.flush()  # in order with what the child processes print, even into a file
