"""``python -m benchmarks.bootstrap_cost``: a thin entry point to ``laya_cli.speed.bootstrap_cost`` (its docstring)."""

from laya_cli.speed.bootstrap_cost import main

if __name__ == "__main__":
    main()
