"""``python -m benchmarks``: every speed benchmark (``harness``; ``make bench``)."""

from .harness import main

main()
