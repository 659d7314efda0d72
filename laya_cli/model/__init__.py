"""The model: LAYA heads and the baselines (``heads``), the tapped backbone + head (``laya_model``), and the
checkpoint format (``checkpoint``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "model.laya_model")
