"""Rendering: terminal and Markdown tables (``tables``), figures (``figures``), the self-contained report.html
(``html``) and a real browser for it (``browser``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(__name__, "report.tables")
