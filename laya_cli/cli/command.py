"""``LayaCommand``: the commands that run a job (train, audit, depth, export, bench, diff) all take ``--config FILE``,
``-v/--verbose`` and ``--log-to`` the same way, added here rather than to each command's parameters.

Before the command runs, ``start`` refuses ``-q`` with ``-v``, records the resolved options (defaults, the
``--config`` file, then flags: what a checkpoint and an audit JSON keep), prints them with ``-v``, and opens the
``--log-to`` tracker: a missing extra, or a tracker that cannot start or write (``Tracker.check``: a bad URI, an
unreachable server, an unwritable folder), is exit 2 before any work. The command reads all of it from
``current_run()``; the tracker's run is finished when the command ends: FINISHED (a missed gate too), FAILED
(an error) or KILLED (interrupted). The tracker is a guest (``tracking.guest.Guest``): what it fails to log later
never stops the command; it is said at the end, and a command that otherwise succeeded exits ``EXIT_NOT_LOGGED``.
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass, field

from typer.core import TyperCommand

from .config_file import META_KEY, recorded_options
from .options import Config, LogTo, Verbose  # module level: the annotations of shared_params' function


@dataclass
class CommandRun:
    """One command's resolved options (``record``: ``{"command", "values"}``), verbosity and tracker."""

    record: dict = field(default_factory=lambda: {"command": None, "values": {}})
    verbose: bool = False
    tracker: object = None  # a tracking.Tracker; None until opened
    started: bool = False
    quiet: bool = False

    def track(self, name: str, before_work: bool = False):
        """The tracker, its run started on first use (named ``name``, the options as its parameters); without
        ``--log-to``, the tracker that does nothing. ``before_work``: a run that cannot start is one line (the
        command has not begun: ``laya train``), not a note at the end."""
        if self.tracker is None:
            from ..runtime.tracking.base import Tracker

            return Tracker()
        if not self.started:
            self.tracker.start(name, self.record["values"], {"laya.command": str(self.record["command"])})
            self.started = True
            if before_work and self.tracker.start_failed():
                self.started = False  # nothing to finish: the one line says it all
                raise self.tracker.start_error()
        return self.tracker

    def not_logged(self) -> bool:
        """The tracker failed to log part of the run (said by ``finish``)."""
        return bool(self.tracker is not None and self.tracker.missed)

    def finish(self, error: BaseException | None) -> None:
        """End the tracker's run: FINISHED (also a missed gate, exit 1: a result), KILLED (interrupted), FAILED."""
        if not self.started:
            return
        code = getattr(error, "exit_code", getattr(error, "code", None)) if error is not None else 0
        if code in (0, 1):
            status = "FINISHED"
        elif isinstance(error, KeyboardInterrupt) or code == 130 or type(error).__name__ == "TrainingInterrupted":
            status = "KILLED"
        else:
            status = "FAILED"
        where = self.tracker.where()
        self.tracker.finish(status)
        if self.tracker.missed:
            say_not_logged(self.tracker.missed_lines())
        elif not self.quiet:
            say_logged(where, status)


_CURRENT: contextvars.ContextVar[CommandRun | None] = contextvars.ContextVar("laya_command_run", default=None)


def current_run() -> CommandRun:
    """The running command's ``CommandRun`` (an empty one outside a ``LayaCommand``: library calls, tests)."""
    return _CURRENT.get() or CommandRun()


def shared_params() -> list:
    """The click parameters of ``--config``, ``-v/--verbose`` and ``--log-to`` (options.py), not passed to the
    command's function: their values go to ``ctx.meta``. Built once (a parameter holds no state of a run), so five
    commands cost one build at every start, ``--help`` included."""
    return list(_shared_params())


@functools.cache
def _shared_params() -> tuple:
    import typer

    shared = typer.Typer(add_completion=False)

    @shared.command()
    def options(config: Config = None, verbose: Verbose = False, log_to: LogTo = None) -> None:
        """Only its parameters are used."""

    params = typer.main.get_command(shared).params
    for p in params:
        p.expose_value = False
    return tuple(params)


def start(ctx) -> CommandRun:
    from ..runtime.environment import check_environment
    from ..runtime.errors import LayaError

    check_environment()  # every LAYA_* variable, before any work (one a command never reads too)
    verbose = bool(ctx.meta.get("laya.verbose"))
    if verbose and ctx.params.get("quiet"):
        raise LayaError("--quiet and --verbose ask for opposite things: give one of them")
    run = CommandRun(
        {"command": ctx.info_name, "values": recorded_options(ctx)}, verbose, quiet=bool(ctx.params.get("quiet"))
    )
    if verbose:
        say_options(ctx, run.record["values"])
    log_to = ctx.meta.get("laya.log_to")
    if log_to:
        from ..runtime.distributed import is_main
        from ..runtime.tracking import open_tracker
        from ..runtime.tracking.guest import Guest

        if is_main():  # under torchrun rank 0 logs
            tracker = open_tracker(log_to)
            tracker.check()  # it can start and write: one line before any work otherwise
            run.tracker = Guest(tracker)
    return run


def say_logged(where: str, status: str) -> None:
    """Where ``--log-to`` logged the run (stderr)."""
    from .common import err_console, escape

    err_console.print(f"[dim]logged ({status.lower()}):[/] {escape(where)}", highlight=False, soft_wrap=True)


def say_not_logged(lines: list[str]) -> None:
    """What the tracker failed to log (stderr; also under --quiet: the exit code says it too)."""
    from .common import err_console, escape

    for i, line in enumerate(lines):
        mark = "[bold yellow]warning:[/] " if i == 0 else "  "
        err_console.print(mark + escape(line), highlight=False, soft_wrap=True)


def say_options(ctx, values: dict) -> None:
    """``--verbose``: the resolved options on stderr, saying where they came from."""
    from .common import err_console, escape

    source = ctx.meta.get(META_KEY)
    where = f"defaults < {source} < flags" if source else "defaults < flags"
    shown = escape("  ".join(f"{k}={v!r}" for k, v in values.items()))
    err_console.print(f"[dim]options ({escape(where)}):[/] {shown}", highlight=False, soft_wrap=True)


class SharedOptions:
    """Adds the shared options (``shared_params``) to a click command or group and runs it inside a
    ``CommandRun`` (``start``, then the tracker's run finished as the command ended)."""

    def __init__(self, *args, params=None, **kwargs):
        super().__init__(*args, params=[*(params or []), *shared_params()], **kwargs)

    def invoke(self, ctx):
        from ..runtime.fileio import claims

        run = start(ctx)
        token = _CURRENT.set(run)
        try:
            with claims():  # the outputs the command checks are its own until it ends (runtime/fileio.py)
                result = super().invoke(ctx)
        except BaseException as e:
            run.finish(e)
            raise
        finally:
            _CURRENT.reset(token)
        run.finish(None)
        if run.not_logged():
            import typer

            from .common import EXIT_NOT_LOGGED

            raise typer.Exit(EXIT_NOT_LOGGED)
        return result


class LayaCommand(SharedOptions, TyperCommand):
    """A job's command (train, audit, depth, export, bench, diff): its own options and the shared ones, listed in
    panels (``panels``)."""

    def format_options(self, ctx, formatter) -> None:
        from .panels import format_options

        format_options(self, ctx, formatter)
