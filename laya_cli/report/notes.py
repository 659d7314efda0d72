"""A note as every form writes it: 'note: …', or 'warning: …' for a note that is a warning (its text starts so):
never 'note: warning: …'."""

from __future__ import annotations

WARNING = "warning: "


def labelled(note: str) -> str:
    """``note`` with its label: a warning as it is, any other note after 'note: '."""
    text = str(note)
    return text if text.startswith(WARNING) else f"note: {text}"
