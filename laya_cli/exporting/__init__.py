"""``laya export``: per-sample statistics (``profiles``) and the job that writes the export folder (``run``)."""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "exporting.run")
