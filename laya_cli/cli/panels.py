"""``--help`` in panels a person can scan: each option is listed under its panel (declared with its setting:
``setting(panel=…)`` or its class's ``PANEL``; the command line's own options in ``options.py``), the panels in
one order for every command — the options most runs set first, then what refines them, outputs last. Plain click
help (no rich: ``laya --help`` imports nothing heavy)."""

from __future__ import annotations

PANELS = (
    "Main",
    "Data",
    "Backbone",
    "Head",
    "Training",
    "α shaping",
    "Language models (--task lm)",
    "Audit",
    "Depth",
    "Export",
    "Diff",
    "Bench",
    "Gates",
    "Checkpoint",
    "Run",
    "Outputs",
)
OTHER = "Outputs"  # an option declared with no panel (click's --help, the shared --config, -v, --log-to)


def format_options(command, ctx, formatter) -> None:
    """The options of ``command`` under their panels' headings, in ``PANELS`` order."""
    groups: dict[str, list] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            groups.setdefault(getattr(param, "rich_help_panel", None) or OTHER, []).append(record)
    order = {name: i for i, name in enumerate(PANELS)}
    for panel in sorted(groups, key=lambda name: order.get(name, len(PANELS))):
        with formatter.section(panel):
            formatter.write_dl(groups[panel])


def format_commands(group, ctx, formatter) -> None:
    """``laya --help``'s commands with their whole first sentence (click cuts them at 45 characters)."""
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            rows.append((name, (command.help or "").strip().split("\n\n")[0].replace("\n", " ")))
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)
