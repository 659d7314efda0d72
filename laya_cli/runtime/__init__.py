"""What every stage stands on and no model code: settings and their validation (``config``), user errors
(``errors``), devices, torchrun, progress output, atomic files, and loading untrusted files (``trust``).
"""
