"""``laya depth``: truncation (``truncation``), compute per tap (``compute``), early exit (``early_exit``), the
analysis (``run``) and the job the command and the API run (``job``).
"""
