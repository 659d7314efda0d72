"""Gating: one check and the verdict (``checks``), ``--fail-under`` (``thresholds``), ``--baseline``/``--max-drop``
(``regression``), JUnit (``junit``), what the gates asked and decided of one audit (``outcome``) and the files
that carry it (``outputs``: JSON, JUnit, Markdown, the job summary). No torch.
"""
