"""The ``laya`` command: the Typer app and its commands (``group``) and every option, declared once
(``options``). Imports nothing heavy: ``laya --help`` loads no torch.
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "cli.group")
