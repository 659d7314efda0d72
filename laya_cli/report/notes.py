"""A note as every form writes it: 'note: …', or 'warning: …' for a note that is a warning (its text starts so):
never 'note: warning: …'."""

from __future__ import annotations

WARNING = "warning: "


def docs_page(page: str) -> str:
    """Where a caption sends its reader: a page of laya's docs, which a wheel installs beside it (``laya --version``
    prints the folder), so a pip user can open it too; a checkout's docs/ holds the same pages."""
    return f"{page} in laya's docs (laya --version prints where)"


def labelled(note: str) -> str:
    """``note`` with its label: a warning as it is, any other note after 'note: '."""
    text = str(note)
    return text if text.startswith(WARNING) else f"note: {text}"
