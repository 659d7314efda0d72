"""``python -m benchmarks.data_scale``: a thin entry point to ``laya_cli.speed.data_scale`` (see its docstring)."""

from laya_cli.speed.data_scale import main

if __name__ == "__main__":
    main()
