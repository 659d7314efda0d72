"""One escaping rule per output format: a string that came from input (a class name, a text, a path, a field of an
attached file) is written so that the format shows it as text and never reads it as its own markup.

- HTML (report.html, the notebook): ``html_text`` — ``& < > " '`` as entities, so a value is inert both between
  tags and inside a quoted attribute.
- Markdown (``--markdown``, the model card): ``md_text`` — every character GitHub-flavoured Markdown gives a
  meaning escaped (a backslash before it; ``< > &`` as entities, which GitHub shows as text), line breaks and
  other control characters made visible on the same line, so a value never opens a heading, a list, a link, an
  HTML tag or a new table row, and never adds a cell (``|``).
- The terminal (rich): ``rich_text`` — rich's markup escaped (``[bold]``, ``[link=…]``, a stray ``[/]``) and
  control characters made visible (an escape sequence never reaches the terminal).
- Figures (matplotlib): ``inert_figure`` — a figure's text is drawn with mathtext and TeX off, so ``$…$`` in a
  label is two dollar signs, not maths (an unknown macro would abort the drawing).

XML (the JUnit report) has its own rule beside its writer (``gates/junit.py``).
"""

from __future__ import annotations

import functools
import html
import re
import warnings

# C0 and C1 control characters and DEL (the tab included: a table has no use for it either).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\u2028\u2029\x0b\x0c\x85]")
# What has a meaning inside a line of GitHub-flavoured Markdown (emphasis, code, links, strikethrough, a cell's end);
# what means something only at a line's start (``#``, ``-``, ``1.``) cannot be there: a value never starts a line.
_MD_SPECIAL = re.compile(r"([\\`*_\[|~$])")
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def visible_controls(text: str) -> str:
    """``text`` with each line break shown as " ⏎ " and each other control character as its escape (``\\x1b``):
    one line, nothing a terminal or a renderer would act on."""
    text = _LINE_BREAKS.sub(" ⏎ ", text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def html_text(value) -> str:
    """A value as HTML text or a quoted attribute's value."""
    return html.escape(str(value), quote=True)


def md_text(value) -> str:
    """A value as Markdown text (a table cell, a heading, a list item, a caption): shown as written, on one line."""
    text = visible_controls(str(value))
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return "".join(_MD_ENTITIES.get(ch, ch) for ch in text)


def rich_text(value) -> str:
    """A value inside a string rich reads as markup."""
    from rich.markup import escape

    return escape(visible_controls(str(value)))


def inert_figure(draw):
    """Decorate a function that draws (and saves) a matplotlib figure: inside it no text is parsed as mathtext or
    TeX, whatever the user's matplotlibrc says."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}), warnings.catch_warnings():
            # a name in a script the font lacks is drawn as boxes; matplotlib's two-line warning per glyph says no more
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
            return draw(*args, **kwargs)

    return wrapper
