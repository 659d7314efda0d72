"""The ``laya`` command: the Typer app, ``LayaGroup`` and ``main`` (``group``), one module per command
(``train``, ``audit``, ``depth``, ``export``, ``bench``, ``info``), what the commands share (``common``) and
every option, declared once (``options``). Imports nothing heavy: ``laya --help`` loads no torch.
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated). The old names of
# the commands themselves (``train``, ``audit``, …) are now the modules that hold them.
__getattr__ = moved_names(__name__, "cli.group", "cli.common", "cli.bench")
