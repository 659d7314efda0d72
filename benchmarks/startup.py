"""``python -m benchmarks.startup``: a thin entry point to ``laya_cli.speed.startup`` (see its docstring)."""

from laya_cli.speed.startup import main

if __name__ == "__main__":
    main()
