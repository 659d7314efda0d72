"""Per-layer features r_1 … r_L: extraction (``extraction``), the sharded store (``store``), and the on-disk cache
and its one key (``cache``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "features.extraction")
