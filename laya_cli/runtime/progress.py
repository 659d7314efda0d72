"""Rich progress bars for long loops, and status lines; silent when disabled (--quiet, tests,
torchrun ranks other than 0).

Commands switch them with ``with progress.enabled(flag): ...``, which restores the previous
setting on exit, so one command (or a test) never changes what the next one prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


class LazyConsole:
    """A rich ``Console`` created on first use, so that importing laya (and ``laya --help``) does not
    import rich. Attribute reads and writes go to the real console; ``get()`` returns it."""

    def __init__(self, **options):
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_console", None)

    @property
    def created(self) -> bool:
        """Whether the real console exists yet (reading this never creates it)."""
        return object.__getattribute__(self, "_console") is not None

    def get(self):
        real = object.__getattribute__(self, "_console")
        if real is None:
            from rich.console import Console

            real = Console(**object.__getattribute__(self, "_options"))
            object.__setattr__(self, "_console", real)
        return real

    def __getattr__(self, name):
        return getattr(self.get(), name)

    def __setattr__(self, name, value):
        setattr(self.get(), name, value)


console = LazyConsole(stderr=True)
_enabled = True


def set_enabled(flag: bool) -> bool:
    """Turn bars and status lines on or off (always off on torchrun ranks other than 0);
    returns the previous setting."""
    global _enabled
    from .distributed import is_main

    previous, _enabled = _enabled, bool(flag) and is_main()
    return previous


@contextlib.contextmanager
def enabled(flag: bool) -> Iterator[None]:
    """Bars and status lines on or off inside the block, restored after it."""
    previous = set_enabled(flag)
    try:
        yield
    finally:
        global _enabled
        _enabled = previous


def is_enabled() -> bool:
    return _enabled


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    if not _enabled or not (console.is_terminal or console.is_jupyter):  # no bars in logs and pipes
        yield from items
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console.get(), transient=True) as progress:
        yield from progress.track(items, total=total, description=description)


def log(message: str) -> None:
    """A status line on stderr (library messages such as 'reusing cached features')."""
    if _enabled:
        console.print(message, highlight=False, soft_wrap=True)
