"""Rendering: the table model every form shares (``cells``), each command's tables for the terminal, Markdown
and report.html (``audit``, ``network``, ``bench``, ``depth``, ``export``, ``info``, ``speed``), figures
(``figures``), the self-contained report.html (``html``, its sample ``explorer``) and a real browser for it
(``browser``).
"""

from .._moved import moved_names

# What the module this package replaced exported, still importable from here (deprecated).
__getattr__ = moved_names(
    __name__,
    "report.cells",
    "report.audit",
    "report.network",
    "report.bench",
    "report.depth",
    "report.export",
    "report.info",
    "report.speed",
)
