"""``python -m benchmarks.report_explorer``: a thin entry point to ``laya_cli.speed.report_explorer``
(see its docstring)."""

from laya_cli.speed.report_explorer import main

if __name__ == "__main__":
    main()
