"""The ``laya`` command: the Typer app, ``LayaGroup`` and ``main`` (``group``), one module per command
(``train``, ``audit``, ``depth``, ``export``, ``diff``, ``bench``, ``info``), what the commands share (``common``),
the Typer options made from the stages' declared settings (``declared``), the command line's own options
(``options``: outputs, gates, display) and its ``--config`` file (``config_file``). Imports nothing heavy:
``laya --help`` loads no torch.
"""

from .group import app, main

__all__ = ["app", "main"]
