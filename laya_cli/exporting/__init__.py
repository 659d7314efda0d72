"""``laya export``: its settings (``settings``), per-sample statistics (``profiles``), a classifier's export folder
(``folder``), a language model's per token (``lm``), the model card (``card``) and the job the command runs
(``job``).
"""
