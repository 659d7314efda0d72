"""What every command line is expected to do before any command runs: ``laya --version`` (laya and the
libraries it stands on, read from the installed distributions' metadata, so nothing is imported) and
``--no-color`` / ``NO_COLOR`` (https://no-color.org: no colour codes, whatever the terminal).

Shell completion is Typer's own (``laya --install-completion``, ``laya --show-completion``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# The distributions ``laya --version`` names: laya itself, then what it computes with (optional ones only
# when installed).
VERSIONED = ("laya-audit", "torch", "timm", "captum", "transformers")
OPTIONAL = ("transformers",)


def versions() -> list[tuple[str, str]]:
    """(name, version) of laya and each library of ``VERSIONED`` that is installed, and the Python running it."""
    from importlib import metadata

    from .. import __version__

    out = [("laya", __version__)]
    for dist in VERSIONED[1:]:
        try:
            out.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            if dist not in OPTIONAL:
                out.append((dist, "not installed"))
    out.append(("python", sys.version.split()[0]))
    return out


def version_text() -> str:
    """``laya --version``: ``laya 0.1.0`` on the first line, one library per line after it, then where the docs
    are (the pages every message and table footer names)."""
    from ..runtime.environment import docs_dir

    where = docs_dir()
    docs = f"docs {where}" if where is not None else "docs not installed with this copy"
    return "\n".join([*(f"{name} {version}" for name, version in versions()), docs]) + "\n"


def show_version(value: bool) -> None:
    """The eager ``--version`` callback: print and stop before any command is looked for."""
    if value:
        import typer

        sys.stdout.write(version_text())
        raise typer.Exit()


def disable_color(consoles) -> Callable[[], None]:
    """``--no-color``: no colour from here on (``NO_COLOR`` for consoles not created yet, ``no_color`` on those
    that are); returns what undoes it, so that one command in a process never changes the next."""
    before = os.environ.get("NO_COLOR")
    os.environ["NO_COLOR"] = "1"
    made = [c for c in consoles if c.created]
    previous = [c.no_color for c in made]
    for c in made:
        c.no_color = True

    def restore() -> None:
        if before is None:
            os.environ.pop("NO_COLOR", None)
        else:
            os.environ["NO_COLOR"] = before
        for c, flag in zip(made, previous):
            c.no_color = flag

    return restore
