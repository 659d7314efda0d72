"""Data sets as image tensors or lazily decoded file images: the registry and split rule (``datasets``), image
sources and decoding (``images``), and large-data shards (``shards``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "data.datasets")
