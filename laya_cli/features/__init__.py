"""Per-layer features r_1 … r_L: extraction (``extraction``), the sharded store (``store``), and the on-disk cache
and its one key (``cache``).
"""
