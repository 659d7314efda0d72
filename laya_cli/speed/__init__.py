"""laya's speed benchmarks, shipped in the package so an installed laya measures itself
(``laya bench speed``, ``python -m laya_cli.speed``). The harness (each benchmark in a fresh process,
ratios side by side) is ``harness``; each benchmark is a module of its own. This file only re-exports.
"""

from .harness import JOBS, QUICK_JOBS, SIZES, main, ratios, run_all, run_child, run_children
from .say import say

__all__ = ["JOBS", "QUICK_JOBS", "SIZES", "main", "ratios", "run_all", "run_child", "run_children", "say"]
