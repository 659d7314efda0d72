"""``python -m benchmarks.depth``: a thin entry point to ``laya_cli.speed.depth`` (see its docstring)."""

from laya_cli.speed.depth import main

if __name__ == "__main__":
    main()
