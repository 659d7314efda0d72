"""Gating: one check and the verdict (``checks``), ``--fail-under`` (``thresholds``), ``--baseline``/``--max-drop``
(``regression``), JUnit (``junit``), what the gates asked and decided of one audit (``outcome``) and the files
that carry it (``outputs``: JSON, JUnit, Markdown, the job summary). No torch.
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "gates.checks")
