"""``python -m benchmarks.gpu``: a thin entry point to ``laya_cli.speed.gpu`` (see its docstring)."""

from laya_cli.speed.gpu import main

if __name__ == "__main__":
    main()
