"""``laya diff``: what changed between two versions of a model on the same data — the per-sample numbers of one
model (``profiles``), their comparison and its tests (``compare``), and the job the command runs (``job``).
"""
