"""``laya depth``: truncation (``truncation``), compute per tap (``compute``), early exit (``early_exit``), the
analysis (``run``) and the job the command and the API run (``job``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "depthing.run")
