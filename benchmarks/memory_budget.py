"""``python -m benchmarks.memory_budget``: a thin entry point to ``laya_cli.speed.memory_budget``
(see its docstring)."""

from laya_cli.speed.memory_budget import main

if __name__ == "__main__":
    main()
