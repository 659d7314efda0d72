"""``python -m benchmarks.network_audit``: a thin entry point to ``laya_cli.speed.network_audit``
(see its docstring)."""

from laya_cli.speed.network_audit import main

if __name__ == "__main__":
    main()
