"""What every stage stands on and no model code: how a setting is declared and checked (``declare``), the
environment (``environment``: the ``LAYA_*`` variables, devices, how a job runs), user errors (``errors``), devices,
torchrun, progress output, atomic files, memory, experiment trackers, and loading untrusted files (``trust``).
"""
