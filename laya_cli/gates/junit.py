"""``laya audit --junit FILE``: the gate checks as JUnit XML, the test report every CI reads.

One ``<testcase>`` per gate check (each ``--fail-under`` threshold × method it applies to, each
``--max-drop`` rule × method); a missed check carries a ``<failure>`` whose message is the line
laya prints and whose text gives the measured and the required value; a check with nothing to
compare (an undefined baseline value) is ``<skipped>``. Every case also records its measured and
required values in ``<system-out>``. The document follows the ``junit-10.xsd`` schema of the
Jenkins xUnit plugin (the dialect GitLab, Jenkins, pytest and most report viewers read); the
tests validate it against a stored copy of that schema. Format: docs/ci.md.
"""

from __future__ import annotations

import datetime as _dt
import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from .checks import Check

CLASSNAMES = {"fail-under": "laya.fail_under", "max-drop": "laya.max_drop"}


# What XML 1.0 cannot hold at all, even escaped: C0 controls but tab, line feed and carriage return; lone surrogates;
# U+FFFE and U+FFFF. ElementTree escapes & < > " (so "]]>" is written "]]&gt;": laya writes no CDATA section) but
# writes these as they are, and no XML parser reads the file back.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(value: object) -> str:
    """A value as XML text or attribute: the characters XML cannot hold shown as escapes (``\\x1b``)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def _value(v: float | None) -> str:
    return "undefined" if v is None else f"{v:.6g}"


def junit_xml(
    checks: Sequence[Check],
    suite: str = "laya audit",
    properties: Mapping[str, object] | None = None,
    seconds: float = 0.0,
    timestamp: _dt.datetime | None = None,
    hostname: str | None = None,
) -> str:
    """The JUnit XML document (a string, UTF-8 declaration included) for ``checks``."""
    failures = sum(c.failed or c.inconclusive for c in checks)
    skipped = sum(c.skipped for c in checks)
    stamp = (timestamp or _dt.datetime.now().astimezone()).replace(microsecond=0).isoformat()
    time_text = f"{max(seconds, 0.0):.3f}"
    root = ET.Element(
        "testsuites",
        {
            "name": xml_text(suite),
            "tests": str(len(checks)),
            "failures": str(failures),
            "errors": "0",
            "time": time_text,
        },
    )
    ts = ET.SubElement(
        root,
        "testsuite",
        {
            "name": xml_text(suite),
            "tests": str(len(checks)),
            "failures": str(failures),
            "errors": "0",
            "skipped": str(skipped),
            "time": time_text,
            "timestamp": stamp,
            "hostname": xml_text(hostname if hostname is not None else socket.gethostname()),
        },
    )
    if properties:
        props = ET.SubElement(ts, "properties")
        for k, v in properties.items():
            ET.SubElement(props, "property", {"name": xml_text(k), "value": "" if v is None else xml_text(v)})
    for c in checks:
        case = ET.SubElement(
            ts,
            "testcase",
            {
                "classname": xml_text(CLASSNAMES.get(c.gate, f"laya.{c.gate}")),
                "name": xml_text(c.name),
                "time": "0.000",
            },
        )
        detail = f"measured: {_value(c.measured)}\nrequired: {xml_text(c.required)}"
        if c.interval is not None:
            detail += f"\ninterval: [{_value(c.interval[0])}, {_value(c.interval[1])}]"
            detail += "\nverdict: " + ("inconclusive" if c.inconclusive else "pass" if c.passed else "fail")
        if c.failed or c.inconclusive:  # inconclusive (--gate-on bound): a failure of its own type
            kind = "inconclusive" if c.inconclusive else c.gate
            el = ET.SubElement(case, "failure", {"type": xml_text(kind), "message": xml_text(c.message)})
            el.text = detail
        elif c.skipped:
            ET.SubElement(case, "skipped", {"message": xml_text(c.message)})
        ET.SubElement(case, "system-out").text = f"{xml_text(c.message)}\n{detail}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
