"""Training: the loop and the ``laya train`` job (``loop``), attention alignment (``alignment``), and
``laya bench`` (``bench``).
"""
