"""Gating: one check and the verdict (``checks``), ``--fail-under`` (``thresholds``), ``--baseline``/``--max-drop``
(``regression``), and JUnit (``junit``). No torch.
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "gates.checks")
