"""Write docs/options.md: every option of every command, its default and its help, from the command line itself.

    python tools/option_tables.py          # rewrites docs/options.md
    python tools/option_tables.py --check  # exit 1 when the page is out of date (tests/test_settings.py)

The settings of a job are declared once, on the dataclasses of the stage that owns them (laya_cli/*/settings.py),
and become Typer options (laya_cli/cli/declared.py); this page is read from those options, so it cannot disagree
with them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from laya_cli.cli.group import app

PAGE = Path(__file__).resolve().parents[1] / "docs" / "options.md"
INTRO = """# Every option

*Reference: every option of every command, its default and its help, written from the declarations.*

Written by `python tools/option_tables.py` from the command line itself (`tests/test_settings.py` checks it is
current). A job's settings are declared once, on the dataclasses of the stage that owns them
(`laya_cli/<stage>/settings.py`); the command line, the Python API's keywords (docs/api.md) and this page are made
from those declarations. Defaults are the command line's (`None`: not set, the command chooses; see each command's
page).
"""


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def default_of(param) -> str:
    if param.is_flag and param.secondary_opts:
        return f"`{param.opts[0] if param.default else param.secondary_opts[0]}`"
    if param.is_flag:
        return "on" if param.default else "off"
    if param.default is None or param.default == ():
        return "—"
    return f"`{param.default}`"


def section(name: str, command) -> list[str]:
    rows = [
        f"## laya {name}",
        "",
        cell((command.help or "").strip().split("\n")[0]),
        "",
        "| option | default | |",
        "|---|---|---|",
    ]
    for param in command.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        flags = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        rows.append(f"| {flags} | {default_of(param)} | {cell(param.help or '')} |")
    return [*rows, ""]


def page() -> str:
    group = typer.main.get_command(app)
    lines = [INTRO]
    for name in sorted(group.commands):
        lines += section(name, group.commands[name])
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    new = page()
    if "--check" in sys.argv:
        sys.exit(0 if PAGE.exists() and PAGE.read_text(encoding="utf-8") == new else 1)
    PAGE.write_text(new, encoding="utf-8")
    print(f"{PAGE}: {new.count('## laya ')} commands")
