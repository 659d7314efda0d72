"""``laya export``: its settings (``settings``), per-sample statistics (``profiles``), a classifier's export folder
(``folder``), a language model's per token (``lm``), the model card (``card``), a classifier's job (``job``) and
the one ``Task`` interface of both tasks, chosen once, with the jobs the commands run on files (``tasks``).
"""
