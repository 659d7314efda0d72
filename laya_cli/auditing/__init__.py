"""Auditing: its settings (``settings``), the audit's vocabulary (``names``) and methods' registry
(``registry``), attribution methods (``methods``: Captum wrapped), pure metric functions (``metrics``), what an
audit returns (``results``), what every audit plans around its batches (``plan``), the head-scope run
(``head_scope``), the network scope (``network``), a language model's audit per token (``lm``), ``laya diff``
(``diff``) and the job the command and the API run (``job``).
"""
