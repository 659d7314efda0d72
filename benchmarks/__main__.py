"""``python -m benchmarks`` in a source checkout: laya's speed benchmarks, which ship inside the
package (``laya_cli.speed``, also ``laya bench speed``). This folder only holds thin entry points
and imports nothing but ``laya_cli``."""

from laya_cli.speed.harness import main

if __name__ == "__main__":
    main()
