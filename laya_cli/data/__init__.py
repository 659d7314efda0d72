"""Data sets as image tensors or lazily decoded file images: the registry and split rule (``datasets``), image
sources and decoding (``images``), and large-data shards (``shards``).
"""
