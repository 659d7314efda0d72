"""The ``laya`` command: the Typer app, ``LayaGroup`` and ``main`` (``group``), one module per command
(``train``, ``audit``, ``depth``, ``export``, ``bench``, ``info``), what the commands share (``common``) and
every option, declared once (``options``). Imports nothing heavy: ``laya --help`` loads no torch.
"""

from .group import app, main

__all__ = ["app", "main"]
