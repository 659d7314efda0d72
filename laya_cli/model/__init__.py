"""The model: its settings (``settings``), LAYA heads and the baselines (``heads``), a language model's heads per
position (``lm_heads``), the tapped backbone + head (``laya_model``), the checkpoint format (``checkpoint``), and
the data a trained model is audited or exported on (``evaldata``).
"""
