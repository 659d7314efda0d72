"""What every command shares: the consoles, the exit-code contract, and the few helpers each command
calls on its options (``--arch``) and on its output (notes, wide tables).

Its own module because ``app.py`` imports every command and every command imports these: one module
for both would be an import cycle. Nothing heavy at import: rich, torch and the backbones load on use.
"""

from __future__ import annotations

from ..runtime.progress import LazyConsole
from ..runtime.tracking.guest import EXIT_NOT_LOGGED  # noqa: F401  (here with the other codes)

console = LazyConsole()  # rich is imported on first print, not by `laya --help`
err_console = LazyConsole(stderr=True)

# The exit-code contract (docs/usage.md#exit-codes): what a CI job can rely on. ``app.LayaGroup`` maps every
# way a command ends to one of these; a command itself raises only ``typer.Exit(EXIT_GATE_FAILED)``.
# EXIT_NOT_LOGGED (4): done, outputs complete, but the --log-to tracker did not log all of it (tracking/guest.py).
EXIT_OK, EXIT_GATE_FAILED, EXIT_USER_ERROR, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def escape(text: str) -> str:
    """Rich markup in a message (a path with [brackets], a class named [/]) is printed as written, not interpreted;
    control characters are shown as escapes (``report/inert.py``)."""
    from ..report.inert import rich_text

    return rich_text(text)


def trust_arch(arch: str | None) -> None:
    """--arch on audit/depth/export: the user names the code a checkpoint trained with --arch imports."""
    if arch:
        from ..backbones.build import trust_code

        trust_code(arch)


def note(text: str) -> None:
    """A note of the library on stderr; one that starts with 'warning: ' is shown as a warning."""
    label, rest = (
        ("[bold yellow]warning:[/]", text[len("warning: ") :])
        if text.startswith("warning: ")
        else ("[yellow]note:[/]", text)
    )
    err_console.print(f"{label} {escape(rest)}", highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """A warning of the command itself on stderr (its text printed as written)."""
    err_console.print(f"[bold yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def wide_console(renderables):
    """The console for wide tables: a log or a pipe has no width, so print them whole, not cut to 80 columns."""
    if console.is_terminal:
        return console
    from rich.console import Console

    unbounded = console.options.update_width(10_000)  # measured against 80 columns, a table never looks wider
    return Console(width=max([console.width, *(console.measure(t, options=unbounded).maximum for t in renderables)]))


def print_tables(tables):
    """Rich tables printed whole (``wide_console``); the console they went to, for a caption after them."""
    wide = wide_console(tables)
    for table in tables:
        wide.print(table)
    return wide


def write_outputs(json_out, json_text, markdown, markdown_text) -> None:
    """``--json`` and ``--markdown`` where asked for, each written atomically; ``json_text``/``markdown_text``
    make the texts (called only for a file asked for)."""
    from ..runtime.fileio import write_texts

    write_texts([(json_out, json_text), (markdown, markdown_text)])  # both, or neither (a full disk)
