"""The model: LAYA heads and the baselines (``heads``), the tapped backbone + head (``laya_model``), the
checkpoint format (``checkpoint``), and the data a trained model is audited or exported on (``evaldata``).
"""
