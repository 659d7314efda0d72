"""``python -m benchmarks.audit_memory``: a thin entry point to ``laya_cli.speed.audit_memory`` (see its docstring)."""

from laya_cli.speed.audit_memory import main

if __name__ == "__main__":
    main()
