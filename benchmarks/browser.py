"""report.html in a real browser: the system Chromium, headless, driven by Playwright's Python API.

Used by the report's browser tests and the explorer benchmark (``benchmarks/report_explorer.py``); not part of the
wheel (a user's laya never drives a browser).
Playwright never downloads a browser here: it drives the installed Chromium (Debian's
``chromium``; set ``LAYA_CHROMIUM`` to use another binary). Every request the page makes other than
for the report file itself is recorded and refused, so a test can assert the page is self-contained.
Needs ``pip install playwright`` (in laya's ``test`` extra); nothing here imports it before use.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser binary: ``$LAYA_CHROMIUM``, else the first of CANDIDATES on PATH."""
    explicit = os.environ.get("LAYA_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def unavailable_reason() -> str | None:
    """Why no browser can be driven here (None when one can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install playwright, or laya-audit[test])"
    if find_chromium() is None:
        return "no Chromium found (Debian: apt-get install chromium; or set LAYA_CHROMIUM to a Chromium/Chrome binary)"
    return None


@contextlib.contextmanager
def chromium():
    """A headless Chromium (a Playwright ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright

    path = find_chromium()
    if path is None:
        raise RuntimeError(unavailable_reason())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watch:
    """What a page did that a self-contained report must not: console errors, uncaught errors, requests."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)


def open_report(browser, path: str | Path, width: int = 1400, height: int = 1000):
    """Open ``path`` (a report.html) in a new page; returns (page, Watch). The page's 'load' has fired."""
    url = Path(path).resolve().as_uri()
    page = browser.new_page(viewport={"width": width, "height": height})
    watch = Watch()
    page.on("console", lambda m: watch.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watch.page_errors.append(str(e)))

    def route(r):
        if r.request.url == url:
            r.continue_()
        else:
            watch.external_requests.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until="load")
    return page, watch


# Where labels overlap or are cut: each element of a selector whose text is wider (or taller) than its box, and each
# pair of them whose boxes intersect (by more than half a pixel each way). Run in the page; returns plain lists.
_LABEL_FAULTS_JS = """sel => {
  const els = [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length);
  const clipped = els.filter(e => e.scrollWidth > e.clientWidth + 0.5 || e.scrollHeight > e.clientHeight + 0.5)
    .map(e => e.textContent);
  const boxes = els.map(e => e.getBoundingClientRect()), overlapping = [];
  for (let i = 0; i < els.length; i++) for (let j = i + 1; j < els.length; j++) {
    const a = boxes[i], b = boxes[j];
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 0.5 && h > 0.5) overlapping.push([els[i].textContent, els[j].textContent]);
  }
  return {count: els.length, clipped: clipped, overlapping: overlapping};
}"""


def label_faults(page, selector: str) -> dict:
    """The labels matched by ``selector`` in ``page`` that are cut (text wider or taller than its box) or overlap
    another: ``{"count": n, "clipped": [text, ...], "overlapping": [[text, text], ...]}``."""
    return page.evaluate(_LABEL_FAULTS_JS, selector)
