"""Auditing: the audit's vocabulary (``names``), attribution methods (``methods``: Captum wrapped), pure
metric functions (``metrics``), what an audit returns (``results``), what both scopes share around their
batches (``scaffold``), the head-scope run (``run``), the network scope (``network``) and the job the command
and the API run (``job``).
"""
