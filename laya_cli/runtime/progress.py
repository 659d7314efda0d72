"""Progress of long loops — a rich bar on a terminal, a plain line every ``LAYA_PROGRESS_INTERVAL`` seconds (30)
in logs and pipes — and status lines; silent when disabled (--quiet, tests, torchrun ranks other than 0).

Commands switch them with ``with progress.enabled(flag): ...``, which restores the previous
setting on exit, so one command (or a test) never changes what the next one prints.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
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

    def print(self, *objects, **options) -> None:
        """The console's ``print``; to a log, a pipe or a file, a line of text is never wrapped (there is no width
        there: a line cut at 80 columns is hard to read and to grep). Tables and panels keep their shape."""
        real = self.get()
        if "soft_wrap" not in options and not (real.is_terminal or real.is_jupyter) and _all_text(objects):
            options["soft_wrap"] = True
        real.print(*objects, **options)

    def __getattr__(self, name):
        return getattr(self.get(), name)

    def __setattr__(self, name, value):
        setattr(self.get(), name, value)


def _all_text(objects) -> bool:
    from rich.text import Text

    return all(isinstance(o, (str, Text)) for o in objects)


console = LazyConsole(stderr=True)
_enabled = True
_active: list = []  # the loops being tracked, innermost last (``within`` and ``phase`` report to it)


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


def plural(unit: str, n: float = 2) -> str:
    """``unit`` for ``n`` of it: 'batch' → 'batches', 'block' → 'blocks' (1 keeps the singular)."""
    if n == 1 or not unit:
        return unit
    return unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")


def track(
    items: Iterable[T], description: str, total: int | None = None, *, unit: str = "step", of: str = ""
) -> Iterator[T]:
    """``items``, with a rich bar on a terminal (or in Jupyter), and in logs and pipes a plain line every
    ``LOG_INTERVAL`` seconds (``log_lines``); nothing when disabled. ``unit``: what one item is, singular ('batch');
    ``of``: what one holds ('of 32 images'), said once in each line, so a line never reads 'epoch 2: 8, 4.6 s each'.
    Work inside an item reports how far it got with ``within`` and ``phase``: the line, the bar and the time left
    move inside one long item too."""
    if not _enabled:
        yield from items
        return
    if not (console.is_terminal or console.is_jupyter):  # no bars in logs and pipes: plain lines
        yield from log_lines(items, description, total, unit=unit, of=of)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console.get(), transient=True) as bar:
        task = bar.add_task(description, total=total, count="")

        def show(tracker: Tracker) -> None:
            bar.update(task, completed=tracker.done + tracker.pos, count=tracker.count_text())

        yield from Tracker(description, total, unit, of, show, interval=0.0).run(items)


def within(items: Iterable[T], n: int | None = None) -> Iterator[T]:
    """``items`` (``n`` of them; default ``len(items)``), each an equal share of the current item of the loop being
    tracked (or of the enclosing ``within`` or ``phase``): its progress is reported after each, so a long item (a
    batch whose layers are patched one by one) moves the line and the time left. A plain loop when none is tracked."""
    tracker = _active[-1] if _active else None
    if tracker is None:
        yield from items
        return
    n = len(items) if n is None else n  # type: ignore[arg-type]
    start, size = tracker.pos, tracker.span()
    for i, item in enumerate(items):
        tracker.enter(start + i * size / max(n, 1), size / max(n, 1))
        try:
            yield item
        finally:
            tracker.leave(start + (i + 1) * size / max(n, 1))


@contextlib.contextmanager
def ticks(n: int) -> Iterator[Callable[[], None]]:
    """A function to call ``n`` times inside (a callback: Captum's passes over IG's steps in internal batches), each
    call moving the current share of the item being tracked on by 1/n; a no-op when none is tracked."""
    tracker = _active[-1] if _active else None
    if tracker is None or n < 1:
        yield lambda: None
        return
    start, size, calls = tracker.pos, tracker.span(), [0]

    def tick() -> None:
        calls[0] = min(calls[0] + 1, n)
        tracker.pos = start + calls[0] * size / n
        tracker.report()

    tracker.enter(start, size)
    try:
        yield tick
    finally:
        tracker.leave(start + size)


@contextlib.contextmanager
def phase(weight: float) -> Iterator[None]:
    """The work inside is ``weight`` (0..1) of the current share of the item being tracked, from where it stands."""
    tracker = _active[-1] if _active else None
    if tracker is None:
        yield
        return
    start, size = tracker.pos, weight * tracker.span()
    tracker.enter(start, size)
    try:
        yield
    finally:
        tracker.leave(start + size)


def _plain(text: str, style: str = ""):
    """``text`` as rich shows it without reading it as markup (a message names paths, classes, layers: a ``[/]`` in
    one is text), its control characters made visible (an escape sequence from input never reaches the terminal)."""
    import re

    from rich.text import Text

    text = re.sub(r"\r\n|[\r\n]", " ⏎ ", str(text))
    return Text(re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text), style=style)


def log(message: str, style: str = "") -> None:
    """A status line on stderr (library messages such as 'reusing cached features'), as written (``style``: rich's,
    e.g. "yellow")."""
    if _enabled:
        console.print(_plain(message, style), highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    """A warning on stderr, shown with progress off too (``--quiet``): what the user must know about a result."""
    from rich.text import Text

    console.print(Text.assemble(("warning:", "bold yellow"), " ", _plain(message)), highlight=False, soft_wrap=True)


LOG_INTERVAL = 30.0  # seconds between two plain progress lines in a log; LAYA_PROGRESS_INTERVAL sets another


def log_interval() -> float:
    """The seconds between two plain progress lines: ``LAYA_PROGRESS_INTERVAL``, else ``LOG_INTERVAL``."""
    from .environment import env

    return env("LAYA_PROGRESS_INTERVAL", LOG_INTERVAL)


FIRST_LINE = 10.0  # seconds: the first plain line (with its time left) comes this early, then every interval


class Tracker:
    """One tracked loop: items done, how far into the current one (``pos``, 0..1, moved by ``within`` and
    ``phase``), and when its last line went out. ``emit`` shows it (a plain line, or the bar's update)."""

    def __init__(self, description, total, unit, of, emit, interval: float, first: float | None = None):
        self.description, self.total, self.unit, self.of, self.emit = description, total, unit, of, emit
        self.interval = interval
        self.first = min(interval, FIRST_LINE) if first is None else first
        self.done, self.pos, self.spans = 0, 0.0, [(0.0, 1.0)]
        self.start = self.last = time.monotonic()
        self.printed, self.shown = False, -1.0
        self.warm: tuple[float, float] | None = None  # (items, seconds) when the first item ended: warm-up excluded

    def run(self, items: Iterable[T]) -> Iterator[T]:
        _active.append(self)
        try:
            for item in items:
                yield item
                self.done, self.pos, self.spans = self.done + 1, 0.0, [(0.0, 1.0)]
                if self.warm is None:
                    self.warm = (1.0, self.seconds())
                if not (self.total and self.done >= self.total):  # the last item: the closing line says it
                    self.report()
        finally:
            _active.remove(self)

    def span(self) -> float:
        return self.spans[-1][1]

    def enter(self, start: float, size: float) -> None:
        self.pos = start
        self.spans.append((start, size))

    def leave(self, end: float) -> None:
        self.spans.pop()
        self.pos = end
        self.report()

    def seconds(self) -> float:
        return time.monotonic() - self.start

    def report(self) -> None:
        """Emit a line when one is due: the first after ``first`` seconds, then every ``interval``."""
        now, at = time.monotonic(), self.done + self.pos
        due = self.interval if self.printed else self.first
        if now - self.last >= due and at != self.shown:  # never the same count twice (an item's end, then its close)
            self.emit(self)
            self.last, self.printed, self.shown = now, True, at

    def count_text(self) -> str:
        done = self.done + self.pos
        count = f"{done:,.1f}" if self.pos else f"{self.done:,}"
        if self.total:
            count += f"/{self.total:,}"
        return f"{count} {plural(self.unit, self.total or done)}"


def log_lines(
    items: Iterable[T],
    description: str,
    total: int | None = None,
    interval: float | None = None,
    *,
    unit: str = "",
    of: str = "",
) -> Iterator[T]:
    """``items``, with a plain line while they last — items done (fractions of one where its work reports them:
    ``within``, ``phase``), the rate, and with a ``total`` the share and the time left — the first after
    ``FIRST_LINE`` seconds (or the interval, if shorter), then every ``interval`` seconds (``LOG_INTERVAL``), and
    one when they end if any was printed: what a long run shows in a log file, a CI job or a pipe, where a rich bar
    would print nothing. A loop shorter than that prints nothing. ``interval`` None: ``log_interval()``."""
    interval = log_interval() if interval is None else interval

    def line(tracker: Tracker) -> None:
        at = tracker.done + tracker.pos
        log_line(progress_text(description, at, total, tracker.seconds(), unit=unit, of=of, warm=tracker.warm))

    tracker = Tracker(description, total, unit, of, line, interval)
    yield from tracker.run(items)
    if tracker.printed:
        log_line(progress_text(description, tracker.done, total, tracker.seconds(), finished=True, unit=unit, of=of))


def progress_text(
    description: str,
    done: float,
    total: int | None,
    seconds: float,
    finished: bool = False,
    *,
    unit: str = "",
    of: str = "",
    warm: tuple[float, float] | None = None,
) -> str:
    """'epoch 3: 120/400 batches of 32 images (30 %), 4.1 batches/s, 1m 08s left' (or '…, done in 1m 37s');
    'auditing: 0.4/5 batches (8 %), 95 s per batch, 7m 24s left' inside a long first batch.

    The time left (``time_left``) is said only on enough evidence: at the pace since the first item ended (``warm``:
    (items, seconds) then; the first carries the warm-up, a first CUDA call, caches filling), or, before one has, once
    a tenth of the total is done; never from 0.0 of a batch (issue 71: '0.0/1 batch … 29m 15s left', done in 4m 53s;
    '1.3/11 batches … 1m 19s left', done in 24 s)."""
    rate = done / seconds if seconds > 0 else float("inf")
    number = f"{done:,.1f}" if done != int(done) else f"{int(done):,}"
    noun = f" {plural(unit, total or done)}" if unit else ""
    detail = f" {of}" if of and unit else ""
    share = f" ({100 * done / total:.0f} %)" if total else ""
    count = f"{number}/{total:,}{noun}{detail}{share}" if total else f"{number}{noun}{detail}"
    per = f" {plural(unit)}/s" if unit else "/s"
    speed = (
        f"{rate:.1f}{per}"
        if rate >= 1 or rate == 0
        else f"{seconds / done:.1f} s " + (f"per {unit}" if unit else "each")
    )
    if finished:
        return f"{description}: {count}, {speed}, done in {_duration(seconds)}"
    left = time_left(done, total, seconds, warm)
    return f"{description}: {count}, {speed}" + (f", {_duration(left)} left" if left is not None else "")


ENOUGH_SHARE = 0.1  # before the first item ends, the share of the total done before a time left is said


def time_left(done: float, total: int | None, seconds: float, warm: tuple[float, float] | None = None) -> float | None:
    """Seconds left at the pace measured since the first item ended (``warm``), else, with a tenth of the total done,
    at the pace so far; None without a total or without enough evidence (``progress_text``)."""
    if not total or done >= total or seconds <= 0:
        return None
    if warm is not None and done > warm[0] and seconds > warm[1]:
        return (total - done) * (seconds - warm[1]) / (done - warm[0])
    if done >= ENOUGH_SHARE * total and done > 0:
        return (total - done) * seconds / done
    return None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def log_line(message: str) -> None:
    """A plain status line (no markup read: a description may hold brackets); nothing when disabled."""
    if _enabled:
        console.print(message, highlight=False, markup=False, soft_wrap=True)
