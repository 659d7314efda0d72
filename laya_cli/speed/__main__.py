"""``python -m laya_cli.speed``: every speed benchmark (the same as ``laya bench speed``)."""

from .harness import main

main()
