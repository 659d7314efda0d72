"""``python -m benchmarks.train_cache``: a thin entry point to ``laya_cli.speed.train_cache`` (see its docstring)."""

from laya_cli.speed.train_cache import main

if __name__ == "__main__":
    main()
