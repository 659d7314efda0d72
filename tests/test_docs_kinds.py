"""The docs come in three kinds, each page one kind (issue 63), and their links resolve.

- Every page of docs/ and docs/results/ says its kind on the line right under its title, exactly one of
  ``*Guide: …*``, ``*Reference: …*`` or ``*Results: …*``; results pages live in docs/results/ (and say the
  machine they ran on), guides and reference pages outside it. docs/options.md gets its marker from
  tools/option_tables.py, which writes the page.
- docs/README.md, the index, links every page.
- Guides and reference pages hold no measurements. The check is a simple heuristic, and it can fail: no line
  (prose, table or code block) may carry a number with a spread (``± 0.021``) or an interval of decimals
  (``[0.812, 0.861]``), the two marks every measured table of this project leaves. It does not catch a bare
  measured number without a spread; it is a floor, not a proof. A few lines are definitional examples that
  look like measurements; ALLOWED names each, with why, and a stale entry fails too.
- Every relative link in README.md, docs/*.md and docs/results/*.md reaches a file, and its anchor a heading of
  that file, by GitHub's rule for heading anchors (lower case, punctuation dropped, spaces to hyphens, a
  repeated heading suffixed -1, -2, …).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + sorted((DOCS / "results").glob("*.md"))
MARKER = re.compile(r"^\*(Guide|Reference|Results): \S.*\*$")
MEASURED = re.compile(r"±\s?\d+\.\d+|\[[-−+]?\d+\.\d+, ?[-−+]?\d+\.\d+\]")
MACHINE = re.compile(r"CPU|GPU|H100|H200|machine|cores?\b")
FENCED = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)

# (page, a fragment of the line, why it is no measurement)
ALLOWED = [
    (
        "audit.md",
        "[0.5, 0.5] against [0.62, 0.38]",
        "two α profiles that show the size --min-js names: a worked example",
    ),
    ("export.md", "[0.5, 0.5] against [0.62, 0.38]", "the same worked example of 0.01 bits, for the attention shift"),
    ("metrics.md", "α entropy 0.000 ± 0.000 of max 1.099 nats", "the audit caption's format, as it prints it"),
    ("api.md", "laya      0.801 [0.780, 0.821]", "a result's repr, printed: how each interval sits in its cell"),
    (
        "ci.md",
        "Wilson 95% CI [0.8162, 0.8947]",
        "a bound check's verdict line as printed: the format the section defines",
    ),
    ("ci.md", "paired 95% CI [-0.0406, +0.0381]", "a paired bound check's verdict line as printed, likewise"),
]


def rel(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def marker_lines(page: Path) -> list[str]:
    return [line for line in page.read_text(encoding="utf-8").splitlines() if MARKER.match(line)]


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_each_page_says_its_one_kind_under_its_title(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# "), f"{rel(page)}: no title on its first line"
    assert len(lines) > 2 and lines[1] == "" and MARKER.match(lines[2]), (
        f"{rel(page)}: the line under the title is not one of *Guide: …*, *Reference: …*, *Results: …*"
    )
    assert len(marker_lines(page)) == 1, f"{rel(page)}: more than one kind marker"
    kind = MARKER.match(lines[2]).group(1)
    in_results = page.parent.name == "results"
    assert (kind == "Results") == in_results, f"{rel(page)}: a {kind} page belongs {'outside' * (not in_results)}"
    if in_results:
        assert MACHINE.search(lines[2]), f"{rel(page)}: a results page says the machine it ran on"


def test_the_marker_rule_can_fail():
    assert MARKER.match("*Guide: train a head on your folder*")
    assert not MARKER.match("*Guide:*") and not MARKER.match("*Tutorial: x*") and not MARKER.match("Guide: x")


def test_options_md_gets_its_marker_from_the_generator():
    """docs/options.md is written by tools/option_tables.py (tests/test_settings.py checks it is current): its
    marker must come from there, not from an edit of the page."""
    source = (ROOT / "tools" / "option_tables.py").read_text(encoding="utf-8")
    assert any(MARKER.match(line) for line in source.splitlines())


def test_the_index_links_every_page():
    index = DOCS / "README.md"
    targets = {(DOCS / t.split("#")[0]).resolve() for t in re.findall(r"\]\(([^)\s]+)\)", index.read_text("utf-8"))}
    missing = [rel(p) for p in PAGES if p != index and p.resolve() not in targets]
    assert not missing, f"docs/README.md does not list {missing}"


def measured_lines(page: Path) -> list[str]:
    allowed = [fragment for name, fragment, _ in ALLOWED if name == rel(page)]
    lines = page.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if MEASURED.search(line) and not any(f in line for f in allowed)]


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent == DOCS], ids=rel)
def test_guides_and_reference_pages_hold_no_measurements(page):
    found = measured_lines(page)
    assert not found, f"{rel(page)} holds measured figures (move them to docs/results/): {found[:3]}"


def test_the_measurement_heuristic_can_fail_and_its_allowlist_is_current():
    assert MEASURED.search("| laya | 0.823 [0.810, 0.837] |") and MEASURED.search("0.956 ± 0.041")
    assert not MEASURED.search("in [0, 1]") and not MEASURED.search("ρ can only be ±1") and not MEASURED.search("± std")
    for name, fragment, why in ALLOWED:
        assert why and fragment in (DOCS / name).read_text(encoding="utf-8"), (
            f"stale allowlist entry: {name}: {fragment}"
        )


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, lower case, all but letters, marks, digits, _, - and space
    dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks), a repeated one suffixed -1, -2, … as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCED.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_anchor(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", FENCED.sub("", page.read_text(encoding="utf-8")))
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_github_anchor_rule():
    assert github_anchor("Ties: the noise floor (`--tie-tol`)") == "ties-the-noise-floor---tie-tol"
    assert github_anchor("α collapse") == "α-collapse"
    assert github_anchor("IG's steps: Gauss–Legendre") == "igs-steps-gausslegendre"


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"
