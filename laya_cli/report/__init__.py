"""Rendering: the table model every form shares (``cells``), each command's tables for the terminal, Markdown
and report.html (``audit``, ``network``, ``bench``, ``depth``, ``export``, ``info``, ``speed``), α collapse in words
(``collapse``), figures (``figures``), the self-contained report.html (``html``, its sample ``explorer``) and a real
browser for it (``browser``).
"""
