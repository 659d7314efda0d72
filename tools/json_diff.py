"""``python tools/json_diff.py A.json B.json [--ignore KEY,...]``: where two laya JSON outputs differ.

For behaviour-preserving changes (a refactor): run the same ``laya audit --json`` / ``laya bench --json`` before
and after, then list every differing value by its path. ``--ignore`` drops paths containing any of the given
fragments (timings, output paths). Exit 0 when nothing else differs, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def differences(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """(path, a's value, b's value) for every leaf that differs; NaN equals NaN (strict JSON writes null)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return [] if a == b or both_nan else [(path, a, b)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--ignore", default="", help="comma-separated path fragments to leave out")
    args = parser.parse_args(argv)
    ignore = [f for f in args.ignore.split(",") if f]
    with open(args.a) as fa, open(args.b) as fb:
        found = differences(json.load(fa), json.load(fb))
    kept = [d for d in found if not any(f in d[0] for f in ignore)]
    for path, x, y in kept:
        print(f"{path}: {x!r} -> {y!r}")
    print(f"{len(kept)} differing values ({len(found) - len(kept)} ignored)")
    return 1 if kept else 0


if __name__ == "__main__":
    sys.exit(main())
