"""What laya echoes back is inert (issue 72): hostile strings — the markup of every format laya writes, control
characters, line breaks, a very long non-Latin name — go in as class names, as the checkpoint's and the data's
folder, and as fields of attached audit and depth JSON, through every output; each output is parsed back the way
its reader reads it (report.html by an HTML parser, Markdown rendered by markdown-it then parsed, the JUnit file by
an XML parser, the terminal as text, a figure's labels from matplotlib) and must show each string as text, never as
structure: no tag, attribute, heading, link, extra table cell, terminal style or maths made from input.

``test_every_output_is_inert[STRING-FORMAT]`` is the matrix: one case per hostile string and output format.
"""

from __future__ import annotations

import csv
import html.parser
import json
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import invoke, run_laya

# The hostile strings, by what they attack. Each becomes a class (a CSV label) and a note of the attached JSON.
HOSTILE = {
    "html": "<script>alert('x')</script><img src=x onerror=alert(1)><svg onload=alert(2)>",
    "markdown": "a|b `c` *d* _e_ ~f~ [link](http://x.test) ![i](http://x.test/i.png) <b>g</b> $m$",
    "newlines": "one\n# injected heading\n| x | y |\r\n- item",
    "rich": "[/] [bold red]PWNED[/bold red] [link=http://x.test]click[/link]",
    "xml+controls": "]]> \x1b[31mred\x1b[0m \x07\x01\x7f ]]&gt;",
    "mathtext": "$\\undefinedmacro$ and 5$",
    "long-non-latin": "Ελληνικά 日本語 עברית " + "長" * 200,
}
# The checkpoint's and the data's folder: every format's markup that a file name can hold (no '/').
HOSTILE_FOLDER = "<b>p</b> [bold]q[/bold] $\\x$ ]]> \x1b[7m|#`*_ ⏎"
FORMATS = (
    "terminal: laya info",
    "terminal: laya audit --by-class",
    "terminal: laya export",
    "markdown: --markdown",
    "markdown: --model-card",
    "html: report.html",
    "xml: --junit",
    "figure: class labels",
)


def shown(text: str) -> str:
    """How a one-line output shows ``text``: line breaks as ' ⏎ ', other control characters as escapes."""
    text = re.sub(r"\r\n|[\r\n]", " ⏎ ", text)
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def _rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng, names = random.Random(seed), list(HOSTILE.values())
    return [(" ".join(rng.choices([f"w{i % 7}{j}" for j in range(6)], k=6)), names[i % 7]) for i in range(n)]


@pytest.fixture(scope="session")
def hostile(tmp_path_factory):
    """A text model trained on the hostile classes in a hostile folder, then every output written."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("hostile")
    config = transformers.BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)  # fmt: skip
    transformers.AutoModel.from_config(config).save_pretrained(root / "bert")
    folder = root / HOSTILE_FOLDER
    (folder / "data").mkdir(parents=True)
    for split, n, seed in (("train", 70, 0), ("test", 35, 1)):
        with open(folder / "data" / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "label"), *_rows(n, seed)])
    ckpt, out = folder / "m.pt", root / "out"
    out.mkdir()
    r = invoke("train", "--backbone", f"hf:{root / 'bert'}", "--dataset", f"csv:{folder / 'data'}", "--max-length",
               8, "--epochs", 1, "--out", ckpt, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    env = {"COLUMNS": "4000", "NO_COLOR": "1"}
    runs = {"info": run_laya("info", ckpt, env=env)}
    outputs = ("--json", out / "a.json", "--markdown", out / "a.md", "--junit", out / "a.xml")
    # --scope head: the by-class table (the hostile class names) is the head scope's; the tiny model's own question
    # is the network scope, where --by-class is refused
    runs["audit"] = run_laya("audit", ckpt, "--scope", "head", "--by-class", "--compare", "", *outputs,
                             "--fail-under", "faithfulness=-2", env=env)  # fmt: skip
    assert runs["audit"].returncode == 0, runs["audit"].stderr
    attach_hostile_json(out / "a.json", out / "evil.json", ckpt)
    runs["export"] = run_laya("export", ckpt, "--audit", out / "evil.json", "--model-card", "--out", out / "exp",
                              env=env)  # fmt: skip
    return {"out": out, "runs": runs, "classes": sorted(HOSTILE.values())}


def attach_hostile_json(audit: Path, evil: Path, ckpt: Path) -> None:
    """An audit JSON whose text fields hold the hostile strings, and a depth result planted beside the checkpoint
    whose per-class table and notes hold them too (both well-typed: what the shape check lets through)."""
    doc = json.loads(audit.read_text(encoding="utf-8"))
    doc["notes"] = list(HOSTILE.values())
    doc["settings"]["dataset"] = doc["settings"]["model"] = " · ".join(HOSTILE.values())
    evil.write_text(json.dumps(doc), encoding="utf-8")
    layers, k = doc["layers"], len(doc["layers"])
    point = {"policy": "p_max", "threshold": 0.5, "accuracy": 0.5, "delta": 0.0, "mean_depth": 1.0,
             "flops_fraction": 0.5, "time_fraction": None}  # fmt: skip
    depth = {
        "format": "laya-depth", "version": 1, "layers": layers, "n_samples": 35, "head": "laya",
        "full": {"accuracy": 0.5}, "compute": {"flops_full_model": 1000, "seconds_per_image": None},
        "truncation": [{"k": i + 1, "layer": name, "accuracy": 0.5, "delta": 0.0, "macro_f1": 0.5, "flops": 500,
                        "flops_block": 500, "flops_fraction": (i + 1) / k} for i, name in enumerate(layers)],
        "early_exit": {"source": "masked", "points": [point],
                       "operating_points": {"1pp": {"best": point, "by_policy": {"p_max": point}}}},
        "oracle": {"source": "masked", "mean_depth": 1.0, "flops_fraction": 0.5, "time_fraction": None,
                   "histogram": [1] * k, "by_class": {name: [1] * k for name in HOSTILE.values()}},
        "notes": list(HOSTILE.values()),
    }  # fmt: skip
    ckpt.with_name("m.depth.json").write_text(json.dumps(depth), encoding="utf-8")


# --------------------------------------------------------------------------- parsing each output back


class Page(html.parser.HTMLParser):
    """The elements, attributes and text (outside scripts and styles) of an HTML document."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.text, self.scripts, self._in = [], [], [], None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("script", "style") else None
        if tag == "script":
            self.scripts.append((dict(attrs), []))

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        (self.scripts[-1][1] if self._in == "script" else [] if self._in == "style" else self.text).append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def assert_no_markup_from_input(page: Page, allowed_tags: set[str], links: tuple[str, ...] = ("#",)) -> None:
    """Only the tags the format's writer uses, no event handler, no image but embedded ones, no link out."""
    assert {t for t, _ in page.tags} <= allowed_tags, {t for t, _ in page.tags} - allowed_tags
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "img":
            assert attrs.get("src", "").startswith(("data:image/png;base64,", "plots/")), attrs
        if tag == "a":
            assert attrs.get("href", "").startswith(links), attrs
    for attrs, parts in page.scripts:  # laya's own: its data, whole JSON with no '<' in it, and its code
        body = "".join(parts)
        if attrs.get("type") == "application/json":
            json.loads(body)
            assert "<" not in body
        else:
            assert "alert(" not in body, body[:200]  # no input in code


def markdown_page(text: str) -> Page:
    """Markdown as GitHub renders it (CommonMark, tables, strikethrough, raw HTML passed through), parsed."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    rendered = md.render(text)
    for table in re.findall(r"<table>.*?</table>", rendered, re.S):  # every row has the header's number of cells
        head = len(re.findall(r"<th\b", table.split("</thead>")[0]))
        rows = re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], re.S)
        assert all(len(re.findall(r"<td\b", r)) == head for r in rows), table
    # markdown-it pads a short row with empty cells and drops extra ones: the source's rows are counted too, every
    # row of a table (a block of lines starting with '|') with as many cells as its header
    for block in re.findall(r"(?m)(?:^\|.*\n?)+", text):
        counts = {_cells(line) for line in block.splitlines()}
        assert len(counts) == 1, block
    return Page(rendered)


def _cells(line: str) -> int:
    """The cells of a Markdown table row: its '|' not escaped by a backslash, less one."""
    return len(re.findall(r"(?<!\\)\|", line)) - 1


MD_TAGS = {"h1", "h2", "h3", "h4", "p", "em", "strong", "code", "pre", "ul", "li", "table", "thead", "tbody", "tr",
           "th", "td", "blockquote", "a", "img"}  # fmt: skip


def check_terminal(hostile, run: str, string: str) -> None:
    r = hostile["runs"][run]
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert "\x1b" not in out and "\x07" not in out  # no escape sequence from input reaches the terminal
    name = string if run != "export" or len(string) < 100 else string[:40]  # export's table may wrap a long name
    assert shown(name) in out, (shown(name), out[-3000:])


def check_markdown(hostile, which: str, string: str) -> None:
    path = hostile["out"] / ("a.md" if which == "audit" else "exp/README.md")
    text = path.read_text(encoding="utf-8")
    if which == "card":
        text = text.split("\n---\n", 1)[1]  # the YAML front matter: JSON-quoted scalars, read by YAML
    page = markdown_page(text)
    assert_no_markup_from_input(page, MD_TAGS, links=("https://pypi.org/project/laya-audit/",))
    assert not [t for t, _ in page.tags if t in ("h1", "h2") and which == "audit"]
    assert shown(string) in page.all_text


def check_html(hostile, string: str) -> None:
    page = Page((hostile["out"] / "exp" / "report.html").read_text(encoding="utf-8"))
    assert_no_markup_from_input(page, {t for t, _ in page.tags} - {"svg"})
    # as a class, as a note of the attached audit, in the planted depth table (a line end read as HTML reads it)
    assert string.replace("\r\n", "\n") in page.all_text
    assert HOSTILE_FOLDER in page.all_text  # the checkpoint's path


def check_junit(hostile, string: str) -> None:
    from laya_cli.gates.checks import Check
    from laya_cli.gates.junit import junit_xml

    check = Check(gate="fail-under", name=string, metric="faithfulness", method=string, measured=0.1,
                  required=f">= {string}", passed=False, message=string)  # fmt: skip
    root = ET.fromstring(junit_xml([check], properties={"model": string}).encode("utf-8"))
    assert root.find(".//testcase").get("name") == _xml_shown(string)
    assert root.find(".//failure").get("message") == _xml_shown(string)
    text = _xml_shown(string).replace("\r\n", "\n")  # every XML parser reads a line end as \n
    assert text in root.find(".//failure").text and text in root.find(".//system-out").text
    assert root.find(".//property").get("value") == _xml_shown(string)
    written = ET.parse(hostile["out"] / "a.xml").getroot()  # the real file, its model a hostile path
    model = next(p.get("value") for p in written.iter("property") if p.get("name") == "model")
    assert _xml_shown(HOSTILE_FOLDER) in model


def _xml_shown(text: str) -> str:
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def check_figure(hostile, string: str, tmp_path) -> None:
    import numpy as np

    from laya_cli.report import figures

    drawn = []
    make = figures._figure
    figures._figure = lambda *a: drawn.append(make(*a)) or drawn[-1]
    try:
        figures.plot_heatmap(np.full((2, 2), 0.5), [string, "plain"], ["l1", "l2"], string, string, tmp_path / "h.png")
    finally:
        figures._figure = make
    labels = [t for ax in drawn[0].axes for t in ax.get_yticklabels()]
    assert string in [t.get_text() for t in labels] and not any(t.get_parse_math() for t in labels)
    assert (hostile["out"] / "exp" / "plots" / "class_layer_all.png").is_file()  # the export drew every class


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_output_is_inert(hostile, name, fmt, tmp_path):
    string = HOSTILE[name]
    kind, what = fmt.split(": ")
    if kind == "terminal":
        check_terminal(hostile, what.split()[1].lstrip("-"), string)
    elif kind == "markdown":
        check_markdown(hostile, "audit" if what == "--markdown" else "card", string)
    elif kind == "html":
        check_html(hostile, string)
    elif kind == "xml":
        check_junit(hostile, string)
    else:
        check_figure(hostile, string, tmp_path)


def test_the_planted_depth_result_is_named_when_used(hostile):
    r = hostile["runs"]["export"]
    assert r.returncode == 0 and "shown m.depth.json, found beside the checkpoint" in r.stderr


def test_each_escaping_rule_round_trips_to_the_text():
    """The rules themselves: a Markdown cell never adds a cell or a line, rich markup prints as written."""
    from rich.console import Console

    from laya_cli.report.inert import md_text, rich_text

    console = Console(width=4000, no_color=True, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    for s in HOSTILE.values():
        assert "\n" not in md_text(s) and _cells(f"| {md_text(s)} |") == 1
        console.print(rich_text(s), highlight=False)
        assert shown(s) in console.export_text()
