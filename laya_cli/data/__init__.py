"""Data sets: their settings (``settings``), image tensors or lazily decoded file images — the registry and split
rule (``datasets``, ``splits``), image sources and decoding (``images``), large-data shards (``shards``) — text data
(``text``, ``textfiles``) and a language model's corpora (``corpus``).
"""
