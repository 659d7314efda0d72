"""Auditing: the audit's vocabulary (``names``), attribution methods (``methods``: Captum wrapped), pure
metric functions (``metrics``), the head-scope run (``run``) and the network scope (``network``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "auditing.run", "gates.thresholds")
