"""Per-layer features r_1 … r_L: extraction (``extraction``), the sharded store (``store``), the on-disk cache
and its one key (``cache``), any module tapped (``attach``), a user's loaders (``loaders``) and a language model's
states at every position (``lm_positions``).
"""
