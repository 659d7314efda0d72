"""Progress of long loops — a rich bar on a terminal, a plain line every ``LAYA_PROGRESS_INTERVAL`` seconds (30)
in logs and pipes — and status lines; silent when disabled (--quiet, tests, torchrun ranks other than 0).

Commands switch them with ``with progress.enabled(flag): ...``, which restores the previous
setting on exit, so one command (or a test) never changes what the next one prints.
"""

from __future__ import annotations

import contextlib
import time
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
    """``items``, with a rich bar on a terminal (or in Jupyter), and in logs and pipes a plain line every
    ``LOG_INTERVAL`` seconds (``log_lines``); nothing when disabled."""
    if not _enabled:
        yield from items
        return
    if not (console.is_terminal or console.is_jupyter):  # no bars in logs and pipes: plain lines
        yield from log_lines(items, description, total)
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


def warn(message: str) -> None:
    """A warning on stderr, shown with progress off too (``--quiet``): what the user must know about a result."""
    console.print(f"[bold yellow]warning:[/] {message}", highlight=False, soft_wrap=True)


LOG_INTERVAL = 30.0  # seconds between two plain progress lines in a log; LAYA_PROGRESS_INTERVAL sets another


def log_interval() -> float:
    """The seconds between two plain progress lines: ``LAYA_PROGRESS_INTERVAL``, else ``LOG_INTERVAL``."""
    from .environment import env

    return env("LAYA_PROGRESS_INTERVAL", LOG_INTERVAL)


def log_lines(
    items: Iterable[T], description: str, total: int | None = None, interval: float | None = None
) -> Iterator[T]:
    """``items``, with a plain line every ``interval`` seconds (``LOG_INTERVAL``) while they last — items done, the
    rate, and with a ``total`` the share and the time left — and one when they end if any was printed: what a
    long run shows in a log file, a CI job or a pipe, where a rich bar would print nothing. A loop shorter than
    the interval prints nothing. ``interval`` None: ``log_interval()``."""
    interval = log_interval() if interval is None else interval
    start = last = time.monotonic()
    done, printed = 0, False
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= interval:
            log_line(progress_text(description, done, total, now - start))
            last, printed = now, True
    if printed:
        log_line(progress_text(description, done, total, time.monotonic() - start, finished=True))


def progress_text(description: str, done: int, total: int | None, seconds: float, finished: bool = False) -> str:
    """'epoch 3: 120/400 (30 %), 4.1/s, 1m 08s left' (or '…, done in 1m 37s')."""
    rate = done / seconds if seconds > 0 else float("inf")
    count = f"{done:,}/{total:,} ({100 * done / total:.0f} %)" if total else f"{done:,}"
    speed = f"{rate:.1f}/s" if rate >= 1 or rate == 0 else f"{seconds / done:.1f} s each"
    if finished:
        return f"{description}: {count}, {speed}, done in {_duration(seconds)}"
    left = f", {_duration((total - done) / rate)} left" if total and total > done and rate > 0 else ""
    return f"{description}: {count}, {speed}{left}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def log_line(message: str) -> None:
    """A plain status line (no markup read: a description may hold brackets); nothing when disabled."""
    if _enabled:
        console.print(message, highlight=False, markup=False, soft_wrap=True)
