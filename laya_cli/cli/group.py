"""The ``laya`` command as click sees it, a group: the Typer app with its commands registered in the order
``laya --help`` lists them (each in its own module), ``LayaGroup``, where every way a command can end becomes
an exit code (the codes: ``common``), and ``main``, the console script.

Options are declared once in ``options.py``; every table is built in ``report``. Nothing heavy is
imported at module level (no torch), so ``laya --help`` starts fast; each command imports what it needs.
"""

from __future__ import annotations

import contextlib
import os
import sys

import typer
from typer.core import TyperGroup

from ..runtime import progress
from ..runtime.distributed import env_world_size
from ..runtime.errors import LayaError, TrainingInterrupted
from . import audit, bench, depth, diff, export, info, train
from .command import LayaCommand
from .common import EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, EXIT_USER_ERROR, console, err_console, escape
from .options import NoColor, Version


def _under_torchrun() -> bool:
    return env_world_size() > 1


def _usage_errors() -> tuple:
    """Usage errors click reports itself, with exit 2 (never an internal error): those of the click that
    recent typer vendors (typer.TyperException) and, when it is loaded, of click itself (older typer)."""
    errors = [typer.Abort, *((typer.TyperException,) if hasattr(typer, "TyperException") else ())]
    click = sys.modules.get("click")
    if click is not None:
        errors += [click.exceptions.ClickException, click.exceptions.Abort]
    return tuple(errors)


class LayaGroup(TyperGroup):
    """Maps every way a command can end to the exit-code contract, from one place:

    0 done; 1 a ``--fail-under`` gate missed (the command raises ``typer.Exit(1)`` itself); 2 a user
    error (``LayaError``, or a usage error click reports): one line on stderr, never a traceback;
    3 an internal error (any other exception): the traceback on stderr, then one line saying it is
    a bug in laya and where to report it; 130 interrupted (Ctrl-C, SIGTERM during training).

    Also where a command starts: ``LAYA_OFFLINE`` is applied (``offline_from_env``), and under
    torchrun the command joins the process group (docs/scaling.md); ranks other than 0 are muted
    (no tables, bars, status lines or warnings; crashes still print a traceback).
    """

    def get_help_option(self, ctx):
        # The group's own --help flag, when not given, is None; recent typer then builds a pydantic
        # validator for it, importing pydantic (~0.15 s) on every `laya <cmd> --help`. False is the
        # same answer ("not given") without that.
        option = super().get_help_option(ctx)
        if option is not None and getattr(option, "default", False) is None:
            option.default = False
        return option

    def format_commands(self, ctx, formatter):
        from .panels import format_commands

        format_commands(self, ctx, formatter)

    def get_params(self, ctx):
        # Typer's completion flags (--install-completion, --show-completion) default to None, and a None flag
        # is coerced through pydantic (~0.15 s on every command). False says "not given" the same way.
        params = super().get_params(ctx)
        for param in params:
            if param.name in ("install_completion", "show_completion") and param.default is None:
                param.default = False
        return params

    def invoke(self, ctx):
        if not _under_torchrun():  # the common case: nothing to join, no torch to import
            return self._run(ctx)
        from ..runtime import distributed

        try:
            distributed.init_from_env()
            with contextlib.ExitStack() as muted:
                if not distributed.is_main():
                    muted.enter_context(_muted())
                return self._run(ctx)
        finally:
            distributed.mark_done()
            distributed.cleanup()

    def _run(self, ctx):
        try:
            offline_from_env()  # LAYA_OFFLINE=maybe: one line, as every other user error
            return super().invoke(ctx)
        except LayaError as e:
            _report_user_error(e)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except typer.Exit as e:  # also click's Exit: typer.Exit is click's, or what typer raises instead
            if getattr(e, "exit_code", 0) and _under_torchrun():
                from ..runtime import distributed

                distributed.wait_for_main()  # e.g. --fail-under: rank 0 may still be writing its outputs
            raise
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except TrainingInterrupted as e:
            err_console.print(f"[bold red]interrupted:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as e:
            if isinstance(e, _usage_errors()):
                if not hasattr(e, "format_message"):
                    raise  # click's Abort: click reports it
                # A value click could not parse (--steps abc): one line, as every other user error.
                where = " ".join(["laya", *([ctx.invoked_subcommand] if ctx.invoked_subcommand else []), "--help"])
                _report_user_error(LayaError(f"{e.format_message()} (see {where})"))
                raise typer.Exit(EXIT_USER_ERROR) from None
            _report_internal_error()
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None


def _report_internal_error() -> None:
    """An exception laya did not anticipate: keep the whole traceback, then say it is our bug, not the user's."""
    import traceback

    from .. import __version__

    traceback.print_exc(file=sys.stderr)
    sys.stderr.write(
        f"internal error (exit {EXIT_INTERNAL_ERROR}): this is a bug in laya {__version__}, not a "
        f"problem with your input; please report it with the command and the traceback above "
        f"to {issue_tracker()}\n"
    )
    sys.stderr.flush()


def issue_tracker() -> str:
    """Where bugs are reported: the ``Issues`` (or ``Bug Tracker``) URL of the installed distribution's
    metadata (pyproject's ``[project.urls]``), else the maintainers named in docs/usage.md."""
    from importlib import metadata

    try:
        for entry in metadata.metadata("laya-audit").get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() in ("issues", "bug tracker", "bugs", "tracker"):
                return url.strip()
    except metadata.PackageNotFoundError:
        pass
    return "the laya maintainers (see docs/usage.md#exit-codes)"


def offline_from_env() -> None:
    """``LAYA_OFFLINE=1`` means no download at all: also put the Hugging Face hub (timm's pretrained
    weights) in offline mode, so a missing weight fails at once instead of after the hub's retries.
    Set before anything imports huggingface_hub, which reads it when first imported."""
    from ..runtime.environment import offline

    if offline():
        os.environ["HF_HUB_OFFLINE"] = "1"


def _report_user_error(e: LayaError) -> None:
    """Print ``error: …`` once. Under torchrun rank 0 prints, unless another rank failed on its own."""
    if not _under_torchrun():
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return
    from ..runtime import distributed

    own = distributed.should_report_error(str(e)) and not distributed.is_main()
    if distributed.is_main():
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    elif own:
        sys.stderr.write(f"error (rank {distributed.rank()}): {e}\n")
    if not own:
        distributed.wait_for_main()  # torchrun stops every rank once one fails: let rank 0 finish


@contextlib.contextmanager
def _muted():
    """Only rank 0 prints: silence the rich consoles, stdout and warnings, restoring all of them after."""
    import warnings

    consoles = (console, err_console, progress.console)
    before = [c.quiet for c in consoles]
    for c in consoles:
        c.quiet = True
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for c, q in zip(consoles, before):
            c.quiet = q
        sys.stdout.close()
        sys.stdout = stdout


app = typer.Typer(
    cls=LayaGroup,
    help="Layer-attribution auditing with LAYA heads: train, audit, export.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion, --show-completion (Typer's; shells detected only when asked)
    rich_markup_mode=None,  # plain click help: typer's rich help imports markdown/pygments (~0.2 s per start)
)


@app.callback()
def root(ctx: typer.Context, version: Version = False, no_color: NoColor = False) -> None:
    """Layer-attribution auditing with LAYA heads: train, audit, export."""
    if no_color:
        from .version_and_color import disable_color

        ctx.call_on_close(disable_color((console, err_console, progress.console)))


app.command(cls=LayaCommand)(train.train)  # --config, -v, --log-to: command.py
app.command(cls=LayaCommand)(audit.audit)
app.command(cls=LayaCommand)(depth.depth)
app.command(cls=LayaCommand)(export.export)
app.command(cls=LayaCommand)(diff.diff)
app.command(cls=LayaCommand)(bench.bench)
app.command()(info.info)


def main() -> None:
    from ..runtime.pipes import flush_standard_streams, guard_standard_streams

    guard_standard_streams()  # a closed reader (`laya audit m.pt | head -2`) ends laya quietly: runtime/pipes.py
    try:
        app()
    finally:
        flush_standard_streams()


if __name__ == "__main__":
    main()
