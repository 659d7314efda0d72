"""The model: LAYA heads and the baselines (``heads``), the tapped backbone + head (``laya_model``), the
checkpoint format (``checkpoint``), and the data a trained model is audited or exported on (``evaldata``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "model.laya_model")
