"""``python -m benchmarks.audit_speed``: a thin entry point to ``laya_cli.speed.audit_speed`` (see its docstring)."""

from laya_cli.speed.audit_speed import main

if __name__ == "__main__":
    main()
