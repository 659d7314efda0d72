"""``laya depth``: its settings (``settings``), truncation (``truncation``), compute per tap (``compute``), early
exit (``early_exit``), the analysis (``analysis``), layers dropped (``drop_orders``: which go first; ``drop_table``:
the table and the thinner checkpoint), a language model's early exit per token (``lm_exit``) and the job the
command and the API run (``job``).
"""
