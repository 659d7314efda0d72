"""Training: its settings (``settings``), the one training job (``job``) and its loop (``loop``), the kind of
model's defaults (``defaults``), attention alignment (``alignment``, ``network_target``), α shaping (``shaping``),
exit-aware training (``exit_aware``), a language model's training (``lm``, ``lm_alignment``) and ``laya bench``
(``bench``, ``bench_lm``, ``bench_stats``).
"""
