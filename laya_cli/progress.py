"""Rich progress bars for long loops; silent when disabled (tests, non-zero ranks, --quiet)."""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
console = Console(stderr=True)
_enabled = True


def set_enabled(flag: bool) -> None:
    """Turn bars and status lines on or off; always off on torchrun ranks other than 0."""
    global _enabled
    from .distributed import is_main

    _enabled = bool(flag) and is_main()


def enabled() -> bool:
    return _enabled


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    if not _enabled or not console.is_terminal:  # no bars in logs and pipes
        yield from items
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        yield from progress.track(items, total=total, description=description)


def log(message: str) -> None:
    """A status line on stderr (library messages such as 'reusing cached features')."""
    if _enabled:
        console.print(message, highlight=False, soft_wrap=True)
