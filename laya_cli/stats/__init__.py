"""Statistics on per-sample numbers, numpy only (no torch: the gates use them): a seeded, vectorised, paired
percentile bootstrap (``bootstrap``), a paired permutation test (``permutation``), McNemar's exact test
(``mcnemar``), multiple-testing corrections (``multiple``), a t-interval over seeds (``tinterval``) and the
Wilson and Newcombe intervals of an accuracy (``proportion``).
"""
