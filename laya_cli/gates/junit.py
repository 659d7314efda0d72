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
import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from .checks import Check

CLASSNAMES = {"fail-under": "laya.fail_under", "max-drop": "laya.max_drop"}


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
        {"name": suite, "tests": str(len(checks)), "failures": str(failures), "errors": "0", "time": time_text},
    )
    ts = ET.SubElement(
        root,
        "testsuite",
        {
            "name": suite,
            "tests": str(len(checks)),
            "failures": str(failures),
            "errors": "0",
            "skipped": str(skipped),
            "time": time_text,
            "timestamp": stamp,
            "hostname": hostname if hostname is not None else socket.gethostname(),
        },
    )
    if properties:
        props = ET.SubElement(ts, "properties")
        for k, v in properties.items():
            ET.SubElement(props, "property", {"name": str(k), "value": "" if v is None else str(v)})
    for c in checks:
        case = ET.SubElement(
            ts, "testcase", {"classname": CLASSNAMES.get(c.gate, f"laya.{c.gate}"), "name": c.name, "time": "0.000"}
        )
        detail = f"measured: {_value(c.measured)}\nrequired: {c.required}"
        if c.interval is not None:
            detail += f"\ninterval: [{_value(c.interval[0])}, {_value(c.interval[1])}]"
            detail += "\nverdict: " + ("inconclusive" if c.inconclusive else "pass" if c.passed else "fail")
        if c.failed or c.inconclusive:  # inconclusive (--gate-on bound): a failure of its own type
            kind = "inconclusive" if c.inconclusive else c.gate
            el = ET.SubElement(case, "failure", {"type": kind, "message": c.message})
            el.text = detail
        elif c.skipped:
            ET.SubElement(case, "skipped", {"message": c.message})
        ET.SubElement(case, "system-out").text = f"{c.message}\n{detail}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
